"""Acceptance: `ledger serve` on its embedded default, over real HTTP, and the commands that join it.

One server (one initdb) serves most tests of this module; the last two stop it, by SIGTERM and by
SIGKILL, and check that the embedded PostgreSQL goes with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from ledger.db.cluster import PostgresNotFound, find_pg_bin, free_port

ROOT = Path(__file__).resolve().parents[1]
VIEWER = "{ viewer { tenantId clientId clientName } }"


def _ledger() -> list[str]:
    script = Path(sys.executable).parent / "ledger"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ledger.cli"]


def _env() -> dict[str, str]:
    """The environment without any LEDGER_* setting (so: the embedded default), except where the
    PostgreSQL binaries are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_") or k == "LEDGER_PG_BIN"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*_ledger(), *args], capture_output=True, text=True, env=_env(), cwd=ROOT,
                          timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent has not reaped it yet


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "data" / "postmaster.pid").read_text().splitlines()[0])


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Server:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir.parent / f"serve-{self.port}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [*_ledger(), "serve", "--data-dir", str(data_dir), "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
        try:
            _wait(self._healthy, 60, f"/healthz of `ledger serve` (log: {self.log})")
        except AssertionError:
            self.stop()
            raise AssertionError(self.output()) from None
        self.postgres_pid = _postmaster_pid(data_dir)

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"`ledger serve` exited with {self.process.returncode}: {self.output()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def graphql(self, query: str, token: str) -> httpx.Response:
        return httpx.post(f"{self.url}/graphql", json={"query": query},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def workdir():
    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc.message}")
    root = Path(tempfile.mkdtemp(prefix="ledger-cli-"))
    os.chmod(root, 0o755)  # the cluster may run as another OS user (when we are root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(workdir):
    served = Server(workdir / "data")
    yield served
    served.stop()


def _admin_token(server: Server) -> str:
    return (server.data_dir / "admin-token").read_text().strip()


# ---------------------------------------------------------------------------- a running server


def test_serve_answers_healthz_without_a_token(server):
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}


def test_serve_runs_its_own_postgres_in_the_data_dir(server):
    assert _alive(server.postgres_pid)
    assert (server.data_dir / "pg" / "data" / "PG_VERSION").exists()


def test_admin_token_file_is_readable_by_its_owner_only(server):
    mode = stat.S_IMODE((server.data_dir / "admin-token").stat().st_mode)
    assert mode == 0o600


def test_admin_token_is_printed_with_the_graphiql_url(server):
    token = _admin_token(server)
    assert f"/graphql#token={token}" in server.output()


def test_admin_token_works_over_http(server):
    response = server.graphql(VIEWER, _admin_token(server))
    assert response.status_code == 200
    admin = json.loads((server.data_dir / "admin.json").read_text())
    assert response.json()["data"]["viewer"] == {"tenantId": admin["tenant"], "clientId": admin["client"],
                                                 "clientName": "admin"}


def test_graphql_without_a_token_is_401(server):
    response = httpx.post(f"{server.url}/graphql", json={"query": VIEWER})
    assert response.status_code == 401
    assert response.json()["errors"][0]["extensions"]["code"] == "unauthenticated"


def test_graphiql_page_is_served(server):
    response = httpx.get(f"{server.url}/graphql")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "GraphiQL" in response.text


def test_metrics_are_served(server):
    server.graphql(VIEWER, _admin_token(server))
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert "ledger_graphql_requests_total" in response.text


def test_token_command_mints_a_working_admin_token(server):
    result = _run("token", "--data-dir", str(server.data_dir), "--ttl", "600")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().splitlines()[-1]
    assert token != _admin_token(server)
    viewer = server.graphql(VIEWER, token).json()["data"]["viewer"]
    assert viewer["clientName"] == "admin"
    assert _alive(server.postgres_pid)  # the command joined the server's cluster and left it running


def test_tenant_create_prints_a_working_token_of_a_new_tenant(server):
    result = _run("tenant", "create", "globex", "--data-dir", str(server.data_dir))
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().splitlines()[-1]
    theirs = server.graphql(VIEWER, token).json()["data"]["viewer"]
    ours = server.graphql(VIEWER, _admin_token(server)).json()["data"]["viewer"]
    assert theirs["tenantId"] != ours["tenantId"]
    assert theirs["clientName"] == "admin"


def test_migrate_twice_concurrently_against_a_running_server(server):
    runs = [subprocess.Popen([*_ledger(), "migrate", "--data-dir", str(server.data_dir)], env=_env(), cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = [(run.wait(timeout=60), run.stderr.read()) for run in runs]
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert server.graphql(VIEWER, _admin_token(server)).status_code == 200


def test_migrate_concurrently_on_a_fresh_data_dir(workdir):
    fresh = workdir / "fresh"
    runs = [subprocess.Popen([*_ledger(), "migrate", "--data-dir", str(fresh)], env=_env(), cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(run.wait(timeout=90), run.stderr.read()) for run in runs]
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    applied = "".join(err for _, err in outcomes)
    assert applied.count("applied migration 0001_foundation.sql") == 1
    # The command that started the cluster stopped it when it was done.
    assert not (fresh / "pg" / "data" / "postmaster.pid").exists()


# ---------------------------------------------------------------------------- stopping


def test_sigterm_stops_the_server_and_its_postgres(server):
    postgres = server.postgres_pid
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    _wait(lambda: not _alive(postgres), 10, "the embedded postgres to stop")
    assert not (server.data_dir / "pg" / "data" / "postmaster.pid").exists()


def test_sigkill_of_the_server_takes_its_postgres_along(workdir, server):
    assert server.process.poll() is not None, "runs after the SIGTERM test"
    again = Server(workdir / "data")  # the same data dir: no initdb this time
    try:
        assert again.graphql(VIEWER, _admin_token(again)).status_code == 200
        again.process.kill()
        again.process.wait(timeout=10)
        _wait(lambda: not _alive(again.postgres_pid), 10, "the embedded postgres to exit after SIGKILL")
    finally:
        again.stop()
        if _alive(again.postgres_pid):
            os.kill(again.postgres_pid, signal.SIGQUIT)


def test_token_command_with_malformed_ids_is_a_clear_error(workdir):
    result = _run("token", "--data-dir", str(workdir / "unused"), "--tenant", "acme", "--client", "bob")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr


def test_serve_refuses_an_http_stack_it_does_not_have(workdir):
    result = subprocess.run([*_ledger(), "serve", "--data-dir", str(workdir / "unused")], capture_output=True,
                            text=True, env={**_env(), "LEDGER_HTTP": "tornado"}, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: LEDGER_HTTP='tornado' names no HTTP stack")
    assert "Traceback" not in result.stderr
    assert not (workdir / "unused").exists()  # refused before it started anything
