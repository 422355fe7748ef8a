"""The executor process itself: what it inherits, the limits it runs under, and that it dies with the server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ledger.runtime import ExecutorPool


def _is_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.startswith("State:") and "Z" in line for line in status)
    except FileNotFoundError:
        return True


@pytest.fixture()
def one_executor(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://ledger:secret@localhost/ledger")
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    try:
        with ExecutorPool(1, memory_limit_bytes=256 << 20) as pool:
            with pool.lease() as lease:
                yield lease.executor_pid
    finally:
        listening.close()


def test_executor_inherits_only_its_pipes(one_executor):
    targets = {os.readlink(f"/proc/{one_executor}/fd/{fd}") for fd in os.listdir(f"/proc/{one_executor}/fd")}
    assert not [target for target in targets if target.startswith("socket:")]
    assert len([target for target in targets if target.startswith("pipe:")]) == 2


def test_executor_gets_a_minimal_environment(one_executor):
    with open(f"/proc/{one_executor}/environ") as environ:
        names = {entry.split("=", 1)[0] for entry in environ.read().split("\0") if entry}
    assert "DATABASE_URL" not in names
    assert names <= {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "RUST_BACKTRACE", "LANG"}


def test_executor_runs_under_its_memory_bound_without_core_dumps(one_executor):
    with open(f"/proc/{one_executor}/limits") as limits:
        lines = {line[:26].strip(): line[26:].split() for line in limits}
    assert lines["Max address space"][:2] == [str(256 << 20)] * 2
    assert lines["Max core file size"][:2] == ["0", "0"]


def test_executors_outlive_the_thread_that_started_them_and_die_with_the_server():
    # The pool starts from a thread that then ends: PR_SET_PDEATHSIG follows the spawning thread,
    # so only a long-lived spawner thread keeps executors alive; they still die with the process.
    server_script = textwrap.dedent(
        """
        import threading, time
        from ledger.runtime import ExecutorPool
        pool = ExecutorPool(2, memory_limit_bytes=256 << 20)
        starter = threading.Thread(target=pool.start)
        starter.start()
        starter.join()
        time.sleep(0.3)
        print(" ".join(str(process.pid) for process in pool._idle if process.is_alive()), flush=True)
        time.sleep(60)
        """
    )
    server = subprocess.Popen([sys.executable, "-c", server_script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in server.stdout.readline().split()]
        assert len(pids) == 2
        assert not any(_is_gone(pid) for pid in pids)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    give_up = time.monotonic() + 5
    while not all(_is_gone(pid) for pid in pids) and time.monotonic() < give_up:
        time.sleep(0.02)
    assert all(_is_gone(pid) for pid in pids)


def test_a_lease_waits_for_a_free_executor_at_the_pools_maximum():
    with ExecutorPool(1, memory_limit_bytes=256 << 20, max_size=1) as pool:
        first = pool.lease()
        released = threading.Timer(0.2, first.release)
        released.start()
        started = time.monotonic()
        with pool.lease(timeout=5) as second:
            assert time.monotonic() - started >= 0.15
            assert second.executor_pid is not None
        with pool.lease(timeout=5) as third:
            from ledger.runtime import ExecutorUnavailable

            with pytest.raises(ExecutorUnavailable):
                pool.lease(timeout=0.05)
            assert third.executor_pid is not None
