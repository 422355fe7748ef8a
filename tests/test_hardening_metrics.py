"""/metrics carries no tenant-chosen strings unless the operator asks, and can require a token (DESIGN 17)."""

from __future__ import annotations

import subprocess
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from invoke_helpers import ALL_ACCESS, invoke, publish, tool
from ledger.config import Settings
from test_invoke_chain import limited_client

SECRET_TOOL = "acme_payroll_secret"
SECRET_QUERY = "acme_board_minutes"
SECRET_CLIENT = "acme_auditor_bot"
CALLER = ('def run(event):\n'
          '    graphql("{ viewer { tenantId } }")\n'
          '    cel("1 + 2")\n'
          '    return {"ok": True}\n')


@pytest.fixture
def metrics_env() -> dict:
    """Environment variables for the test's Settings (parametrize a test to change them)."""
    return {}


@pytest.fixture
def settings(db_url, tmp_path, metrics_env, monkeypatch) -> Settings:
    for name, value in metrics_env.items():
        monkeypatch.setenv(name, value)
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10)


def _calls_with_chosen_names(api, suffix: str = "") -> None:
    """Calls of a tool, of a graphql-kind action and of a named client, failing and succeeding."""
    secret = publish(api, tool(SECRET_TOOL + suffix, CALLER))
    assert invoke(api, secret)["status"] == "SUCCEEDED"
    broken = publish(api, tool(f"{SECRET_TOOL}_broken{suffix}", 'def run(event):\n    fail("no")\n'))
    assert invoke(api, broken)["status"] == "FAILED"
    query = publish(api, {"name": SECRET_QUERY + suffix, "kind": "graphql", "policies": ALL_ACCESS})
    assert invoke(api, query, {"document": "{ viewer { tenantId } }"})["status"] == "SUCCEEDED"
    client = limited_client(api, [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]},
                                  {"effect": "ALLOW", "actions": ["INSERT"],
                                   "resources": ["financial.ActionExecution.*"]}], name=SECRET_CLIENT + suffix)
    assert invoke(client, secret)["status"] == "SUCCEEDED"


def _calls_by_labels(text: str) -> dict:
    return {frozenset(sample.labels.items()): sample.value for family in text_string_to_metric_families(text)
            if family.name == "ledger_calls" for sample in family.samples if sample.name == "ledger_calls_total"}


def test_by_default_no_tenant_chosen_name_appears_in_metrics(api):
    before = _calls_by_labels(api.http.get("/metrics").text)  # metrics are process-wide: compare
    _calls_with_chosen_names(api)
    response = api.http.get("/metrics")
    assert response.status_code == 200
    text = response.text
    for name in (SECRET_TOOL, SECRET_QUERY, SECRET_CLIENT):
        assert name not in text, f"{name!r} is in /metrics"
    # The calls are still counted: by kind, which is the ledger's own vocabulary.
    after = _calls_by_labels(text)

    def counted(kind: str, status: str = "SUCCEEDED", code: str = "none") -> float:
        labels = frozenset({"kind": kind, "action": "", "status": status, "code": code}.items())
        return after.get(labels, 0) - before.get(labels, 0)

    # Two calls of the tool; its graphql() twice and the graphql-kind action once; its cel() twice.
    assert (counted("tool"), counted("graphql"), counted("cel")) == (2, 3, 2)
    assert counted("tool", "FAILED", "action_failure") == 1


@pytest.mark.parametrize("metrics_env", [{"LEDGER_METRICS_PER_ACTION": "1"}])
def test_with_per_action_metrics_the_operator_sees_action_names(api):
    # Other names than the default test's: the registry is process-wide, and outlives a test.
    _calls_with_chosen_names(api, "_shown")
    text = api.http.get("/metrics").text
    assert f'action="{SECRET_TOOL}_shown"' in text and f'action="{SECRET_QUERY}_shown"' in text
    # Client names are never labels.
    assert SECRET_CLIENT not in text


TOKEN = "scrape-" + uuid.uuid4().hex


@pytest.mark.parametrize("metrics_env", [{"LEDGER_METRICS_TOKEN": TOKEN}])
def test_with_a_metrics_token_a_scrape_must_present_it(api):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer"},
                    {"Authorization": f"Bearer {TOKEN[:-1]}"}, {"Authorization": "Bearer \u00e9t\u00e9".encode()}):
        refused = api.http.get("/metrics", headers=headers)
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "LEDGER_METRICS_TOKEN" in refused.text and "ledger_calls" not in refused.text
    allowed = api.http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert allowed.status_code == 200 and "ledger_calls_total" in allowed.text
    # The API's own tokens are something else: /graphql is unaffected.
    assert api.gql("{ viewer { tenantId } }")["viewer"]["tenantId"] == str(api.tenant_id)


def test_a_worker_process_metrics_port_requires_the_token_and_names_no_action(api, db_url):
    from test_cli_serve import _env, _ledger

    from ledger.db.cluster import free_port

    action_id = publish(api, tool(SECRET_TOOL, CALLER))
    api.gql("""mutation($id: UUID!, $input: StartActionInput!) { actions {
        startAction(id: $id, input: $input) { executionId } } }""",
            {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    worker = subprocess.Popen([*_ledger(), "worker", "--database-url", db_url, "--metrics-port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**_env(), "LEDGER_METRICS_TOKEN": TOKEN}, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert worker.poll() is None, worker.stdout.read()
            assert time.monotonic() < deadline
            try:
                response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            assert response.status_code == 200
            if 'kind="tool"' in response.text and 'status="SUCCEEDED"' in response.text:
                break
            time.sleep(0.2)
        assert SECRET_TOOL not in response.text
        refused = httpx.get(url, timeout=5)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def test_several_server_processes_require_the_token_and_name_no_action(tmp_path):
    """`ledger serve --workers 2` (prometheus-client's multiprocess mode): every process checks the token,
    and the summed series carry no action name."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from conftest import Api
    from test_cli_serve import _env, _ledger

    from ledger.db.cluster import PostgresNotFound, find_pg_bin, free_port

    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc.message}")
    root = Path(tempfile.mkdtemp(prefix="ledger-metrics-"))
    os.chmod(root, 0o755)  # the cluster may run as another OS user (when we are root)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([*_ledger(), "serve", "--data-dir", str(root / "data"), "--port", str(port),
                                   "--workers", "2", "--no-worker"], stdout=out, stderr=subprocess.STDOUT,
                                  env={**_env(), "LEDGER_METRICS_TOKEN": TOKEN})
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        token = (root / "data" / "admin-token").read_text().strip()
        with httpx.Client(base_url=url, timeout=30) as client:
            admin = Api(client, token, None, None)
            secret = publish(admin, tool(SECRET_TOOL, CALLER))
            for _ in range(2):
                assert invoke(admin, secret)["status"] == "SUCCEEDED"
        # A new connection each time, so that both processes answer some.
        for _ in range(8):
            refused = httpx.get(f"{url}/metrics", timeout=10)
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
            allowed = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            assert allowed.status_code == 200
            assert SECRET_TOOL not in allowed.text
            calls = _calls_by_labels(allowed.text)
            assert calls[frozenset({"kind": "tool", "action": "", "status": "SUCCEEDED", "code": "none"}.items())] == 2
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)
