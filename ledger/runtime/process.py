"""The server's handle on one executor child process: spawn, talk, kill.

Executors are started with subprocess (fork+exec of a fresh interpreter, never a fork of the
threaded server), from a single long-lived spawner thread: the child asks for SIGKILL when its
parent *thread* exits (PR_SET_PDEATHSIG), so spawning from short-lived request threads would kill
executors whenever such a thread ends. The child gets only its two pipe ends (close_fds), so no
database socket leaks into it, and a minimal environment, so no credentials do either.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ledger
from ledger.runtime.limits import ExecutorSettings
from ledger.runtime.protocol import MAX_ENVELOPE_BYTES, Channel, Message

# The executor must import this same checkout of `ledger`, whatever the server's cwd.
_PACKAGE_ROOT = str(Path(ledger.__file__).resolve().parent.parent)


class ExecutorStartFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class _SpawnRequest:
    argv: list[str]
    env: dict[str, str]
    stdin: int
    stdout: int
    result: Future


class _Spawner:
    """Runs every Popen of the process on one daemon thread that lives as long as the process."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_SpawnRequest] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def spawn(self, argv: list[str], env: dict[str, str], stdin: int, stdout: int) -> subprocess.Popen:
        request = _SpawnRequest(argv, env, stdin, stdout, Future())
        self._ensure_thread()
        self._requests.put(request)
        return request.result.result()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="ledger-executor-spawner", daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            try:
                popen = subprocess.Popen(
                    request.argv,
                    stdin=request.stdin,
                    stdout=request.stdout,
                    env=request.env,
                    close_fds=True,
                    start_new_session=True,  # a Ctrl-C meant for the server is not the executors'
                )
            except BaseException as error:
                request.result.set_exception(error)
            else:
                request.result.set_result(popen)


_SPAWNER = _Spawner()


class ExecutorProcess:
    """One executor child. Used by one thread at a time (the lease holding it)."""

    def __init__(self, popen: subprocess.Popen, channel: Channel, settings: ExecutorSettings) -> None:
        self._popen = popen
        self.channel = channel
        self.settings = settings
        self.pid: int = popen.pid
        self.ready = False
        # Set when the executor asked to be replaced after its current call tree.
        self.retiring = False
        self._killed = False

    @classmethod
    def spawn(cls, settings: ExecutorSettings) -> ExecutorProcess:
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        argv = [
            sys.executable,
            "-m",
            "ledger.runtime.executor",
            json.dumps(settings.to_dict()),
            str(os.getpid()),
        ]
        env = {
            "PYTHONPATH": _PACKAGE_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "RUST_BACKTRACE": "0",  # a failed allocation prints one line, not a backtrace
            "LANG": "C.UTF-8",
        }
        try:
            popen = _SPAWNER.spawn(argv, env, to_child_read, from_child_write)
        except BaseException:
            for fd in (to_child_read, to_child_write, from_child_read, from_child_write):
                os.close(fd)
            raise
        os.close(to_child_read)
        os.close(from_child_write)
        return cls(popen, Channel(from_child_read, to_child_write), settings)

    def wait_ready(self, timeout: float) -> None:
        if self.ready:
            return
        try:
            message = self.channel.receive(time.monotonic() + timeout)
        except Exception as error:
            self.kill()
            raise ExecutorStartFailed(f"executor {self.pid} did not start: {error!r}") from None
        if message.kind != "ready":
            self.kill()
            raise ExecutorStartFailed(f"executor {self.pid} sent {message.kind!r} instead of ready")
        self.ready = True

    def send(self, envelope: dict[str, Any] | bytes, payload: bytes | None = None) -> None:
        """`envelope`: a dict, or one already encoded (a constant envelope, encoded once)."""
        if isinstance(envelope, bytes):
            self.channel.send_encoded(envelope, payload)
        else:
            self.channel.send(envelope, payload)

    def receive(self, deadline: float) -> Message:
        # Slack over the payload bound for the envelope; the executor checks the exact bound itself.
        return self.channel.receive(deadline, self.settings.max_payload_bytes + MAX_ENVELOPE_BYTES)

    @property
    def killed(self) -> bool:
        """Whether this handle killed its process (it is then gone, or going)."""
        return self._killed

    def is_alive(self) -> bool:
        return not self._killed and self._popen.poll() is None

    def kill(self) -> None:
        """SIGKILL (idempotent), reap and close the wire."""
        if not self._killed:
            self._killed = True
            try:
                os.kill(self._popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._popen.wait()
            self.channel.close()

    def exit_status(self, timeout: float = 5.0) -> int | None:
        """After the wire closed: how the process ended (negative: the signal), then reaped."""
        try:
            returncode = self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        self.kill()
        return returncode
