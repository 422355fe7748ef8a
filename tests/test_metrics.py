"""The operating path: Prometheus metrics at /metrics, structured JSON logs naming the call, and each
execution's latency and result size.

Metrics are process-wide (one registry per process), so the checks compare a scrape before and after.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from invoke_helpers import invoke, publish, tool
from ledger.config import Settings
from ledger.logs import JsonFormatter

LEAF = 'def run(event):\n    return {"n": event["data"]["n"] * 2}\n'
CALLER = ('def run(event):\n'
          '    graphql("{ viewer { tenantId } }")\n'
          '    cel("1 + 2")\n'
          '    return tools.leaf({"n": event["data"]["n"]})\n')
BROKEN = 'def run(event):\n    fail("no")\n'

FAMILIES = {
    # requests by outcome
    "ledger_graphql_requests": "counter",
    "ledger_graphql_request_seconds": "histogram",
    # calls by action, status and error code; their latency, result size, and calls per tree
    "ledger_calls": "counter",
    "ledger_call_duration_seconds": "histogram",
    "ledger_call_output_bytes": "histogram",
    "ledger_calls_per_tree": "histogram",
    # the queue: depth, claim latency, attempts and retries
    "ledger_queue_depth": "gauge",
    "ledger_queue_claim_latency_seconds": "histogram",
    "ledger_queue_attempts": "counter",
    "ledger_queue_retries": "counter",
    # pools: database connections, sandbox executors
    "ledger_db_pool_connections": "gauge",
    "ledger_db_pool_requests_waiting": "gauge",
    "ledger_db_pool_requests": "counter",
    "ledger_db_pool_wait_seconds": "counter",
    "ledger_db_pool_request_errors": "counter",
    "ledger_executors": "gauge",
}


def scrape(http) -> dict:
    """{family: {(sample name, frozenset(labels)): value}} of one GET /metrics."""
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out: dict = {}
    for family in text_string_to_metric_families(response.text):
        samples = out.setdefault(family.name, {"type": family.type, "samples": {}})["samples"]
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(metrics: dict, family: str, sample: str | None = None, **labels) -> float:
    samples = metrics.get(family, {}).get("samples", {})
    return samples.get((sample or family, frozenset(labels.items())), 0.0)


def _leaf_and_caller(api) -> tuple[str, str]:
    publish(api, tool("leaf", LEAF))
    return publish(api, tool("caller", CALLER, tools=[{"name": "leaf"}])), publish(api, tool("broken", BROKEN))


@pytest.fixture
def metrics_env() -> dict:
    """Environment variables for the test's Settings (parametrize a test to change them)."""
    return {}


@pytest.fixture
def settings(db_url, tmp_path, metrics_env, monkeypatch) -> Settings:
    for name, setting in metrics_env.items():
        monkeypatch.setenv(name, setting)
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10)


# Series per action carry tenants' action names: only when the operator asks (DESIGN 17).
@pytest.mark.parametrize("metrics_env", [{"LEDGER_METRICS_PER_ACTION": "1"}])
def test_a_scrape_has_every_family_after_a_few_calls(api, services):
    from ledger.queue.worker import Worker

    caller_id, broken_id = _leaf_and_caller(api)
    before = scrape(api.http)
    for n in range(3):
        assert invoke(api, caller_id, {"n": n})["status"] == "SUCCEEDED"
    assert invoke(api, broken_id)["status"] == "FAILED"
    # A started execution that fails once and is retried: the queue's families move too.
    flaky = tool("flaky", BROKEN)
    flaky["execution"] = {"maxAttempts": 2, "backoffSeconds": 0.05}
    flaky_id = publish(api, flaky)
    started = api.gql("""mutation($id: UUID!, $input: StartActionInput!) { actions {
        startAction(id: $id, input: $input) { executionId } } }""",
                      {"id": flaky_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    execution_id = started["actions"]["startAction"]["executionId"]
    worker = Worker(services, concurrency=1, lease_seconds=2.0, poll_interval=0.1).start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = api.gql('query($id: UUID!) { actions { execution(id: $id) { status } } }',
                             {"id": execution_id})["actions"]["execution"]["status"]
            if status == "FAILED":
                break
            time.sleep(0.05)
        assert status == "FAILED"
    finally:
        worker.stop()
    after = scrape(api.http)

    missing = {name: kind for name, kind in FAMILIES.items() if after.get(name, {}).get("type") != kind}
    assert not missing, f"families missing (or of another type): {missing}"

    def delta(family, sample=None, **labels):
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    # Each invoke is a tree: caller, graphql(), cel() and leaf; the broken one is a tree of one.
    # Per action (LEDGER_METRICS_PER_ACTION=1): each series also names its kind.
    assert delta("ledger_calls", "ledger_calls_total", kind="tool", action="caller", status="SUCCEEDED",
                 code="none") == 3
    assert delta("ledger_calls", "ledger_calls_total", kind="tool", action="leaf", status="SUCCEEDED",
                 code="none") == 3
    assert delta("ledger_calls", "ledger_calls_total", kind="graphql", action="graphql", status="SUCCEEDED",
                 code="none") == 3
    assert delta("ledger_calls", "ledger_calls_total", kind="cel", action="cel", status="SUCCEEDED", code="none") == 3
    assert delta("ledger_calls", "ledger_calls_total", kind="tool", action="broken", status="FAILED",
                 code="action_failure") == 1
    # The started execution: two attempts, both failed, the first retried.
    assert delta("ledger_calls", "ledger_calls_total", kind="tool", action="flaky", status="FAILED",
                 code="action_failure") == 2
    assert delta("ledger_queue_retries", "ledger_queue_retries_total") == 1
    assert delta("ledger_queue_attempts", "ledger_queue_attempts_total", outcome="retry") == 1
    assert delta("ledger_queue_claim_latency_seconds", "ledger_queue_claim_latency_seconds_count") == 2

    assert delta("ledger_call_duration_seconds", "ledger_call_duration_seconds_count", kind="tool",
                 action="caller") == 3
    assert delta("ledger_call_output_bytes", "ledger_call_output_bytes_count") >= 12 + 1 + 2
    # Trees: three of four calls, one of one (the invokes), two of one (the attempts).
    assert delta("ledger_calls_per_tree", "ledger_calls_per_tree_count") == 6
    assert delta("ledger_calls_per_tree", "ledger_calls_per_tree_bucket", le="2.0") == 3
    assert delta("ledger_calls_per_tree", "ledger_calls_per_tree_sum") == 3 * 4 + 1 + 2

    assert delta("ledger_graphql_requests", "ledger_graphql_requests_total", outcome="ok") >= 4
    assert value(after, "ledger_queue_depth") == 0
    assert value(after, "ledger_db_pool_connections", state="max") == services.settings.pool_max
    assert value(after, "ledger_db_pool_connections", state="open") >= 1
    assert delta("ledger_db_pool_requests", "ledger_db_pool_requests_total") > 0
    assert value(after, "ledger_executors", state="live") >= 1


def test_the_queue_depth_is_read_on_scrape(api):
    """Without a worker in this process, the depth still shows what waits."""
    action_id = publish(api, tool("leaf", LEAF))
    for _ in range(2):
        api.gql("""mutation($id: UUID!, $input: StartActionInput!) { actions {
            startAction(id: $id, input: $input) { executionId } } }""",
                {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {"n": 1}}})
    assert value(scrape(api.http), "ledger_queue_depth") == 2


# ---------------------------------------------------------------------------- latency and size per execution

TREE = """query($id: UUID!) { actions { execution(id: $id) {
  invocation { output durationMs outputBytes startedAt finishedAt }
  children { actionId invocation { output error { code } durationMs outputBytes } } } } }"""


def test_each_execution_records_its_latency_and_result_size(api):
    caller_id, broken_id = _leaf_and_caller(api)
    called = invoke(api, caller_id, {"n": 21})
    assert called["invocation"]["output"] == {"n": 42}

    stored = api.gql(TREE, {"id": called["executionId"]})["actions"]["execution"]
    top = stored["invocation"]
    assert top["outputBytes"] == len(b'{"n":42}')
    assert 0 < top["durationMs"] < 30_000
    children = stored["children"]
    assert [c["invocation"]["outputBytes"] for c in children] == [
        len(json.dumps(c["invocation"]["output"], separators=(",", ":")).encode()) for c in children]
    assert all(c["invocation"]["durationMs"] is not None and c["invocation"]["durationMs"] >= 0 for c in children)
    # Every child ran within its parent.
    assert sum(c["invocation"]["durationMs"] for c in children) <= top["durationMs"]

    failed = invoke(api, broken_id)
    read = api.gql(TREE, {"id": failed["executionId"]})["actions"]["execution"]["invocation"]
    error = api.gql('query($id: UUID!) { actions { execution(id: $id) { invocation { error { code message hint } } } } }',
                    {"id": failed["executionId"]})["actions"]["execution"]["invocation"]["error"]
    # A failed call's result is its error.
    assert read["output"] is None and read["outputBytes"] == len(json.dumps(error, separators=(",", ":")).encode())


def test_a_started_attempt_records_its_latency_and_result_size(api, services):
    from ledger.queue.worker import Worker

    action_id = publish(api, tool("leaf", LEAF))
    execution_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $input: StartActionInput!) { actions {
        startAction(id: $id, input: $input) { executionId } } }""",
            {"id": action_id, "input": {"executionId": execution_id, "input": {"n": 5}}})
    worker = Worker(services, concurrency=1, lease_seconds=2.0, poll_interval=0.1).start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            invocation = api.gql(TREE, {"id": execution_id})["actions"]["execution"]["invocation"]
            if invocation:
                break
            time.sleep(0.05)
    finally:
        worker.stop()
    assert invocation["output"] == {"n": 10}
    assert invocation["outputBytes"] == len(b'{"n":10}')
    assert invocation["durationMs"] > 0


# ---------------------------------------------------------------------------- structured logs


@pytest.fixture
def json_log():
    """Every line the ledger logs meanwhile, as JSON objects (DEBUG and up)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ledger")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_every_line_about_a_call_names_it(api, json_log):
    caller_id, _ = _leaf_and_caller(api)
    called = invoke(api, caller_id, {"n": 1})
    lines = json_log()
    about_calls = [line for line in lines if line["logger"] == "ledger.calls"]
    # The top-level call at INFO, its three nested calls at DEBUG.
    assert sorted((line["action"], line["level"]) for line in about_calls) == [
        ("caller", "info"), ("cel", "debug"), ("graphql", "debug"), ("leaf", "debug")]
    for line in about_calls:
        assert line["rootExecutionId"] == called["executionId"]
        assert line["tenant"] == str(api.tenant_id)
        assert line["status"] == "SUCCEEDED" and line["code"] is None
        assert isinstance(line["durationMs"], float) and isinstance(line["outputBytes"], int)
        assert set(line) >= {"ts", "level", "logger", "message", "executionId", "rootExecutionId", "tenant",
                             "action"}
    top = next(line for line in about_calls if line["action"] == "caller")
    assert top["executionId"] == called["executionId"] and top["outputBytes"] == len(b'{"n":2}')


def test_lines_logged_during_a_call_carry_its_context():
    from ledger.logs import bind_call, unbind_call

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.ledger.context")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        outer = bind_call(execution_id="e1", root_execution_id="e1", tenant="t", action="top")
        inner = bind_call(execution_id="e2", action="nested")
        logger.warning("inside %s", "nested")
        unbind_call(inner)
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("inside top")
        unbind_call(outer)
        logger.warning("outside", extra={"executionId": "explicit"})
    finally:
        logger.removeHandler(handler)
    nested, top, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (nested["executionId"], nested["rootExecutionId"], nested["tenant"], nested["action"]) == \
        ("e2", "e1", "t", "nested")
    assert nested["message"] == "inside nested" and nested["level"] == "warning"
    assert (top["executionId"], top["action"]) == ("e1", "top") and "ValueError: boom" in top["exception"]
    assert outside["executionId"] == "explicit" and "tenant" not in outside


# ---------------------------------------------------------------------------- several server processes


def _samples(url: str) -> dict:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _requests_per_process(metrics_dir: Path) -> dict[str, float]:
    from prometheus_client.mmap_dict import MmapedDict

    counts = {}
    for path in metrics_dir.glob("counter_*.db"):
        counts[path.stem.split("_", 1)[1]] = sum(
            value for key, value, *_ in MmapedDict.read_all_values_from_file(str(path))
            if json.loads(key)[0] == "ledger_graphql_requests")
    return counts


def test_a_scrape_sees_every_server_process(tmp_path):
    """`ledger serve --workers 2`: prometheus-client's multiprocess mode sums the processes."""
    from test_cli_serve import _env, _ledger

    from ledger.db.cluster import PostgresNotFound, find_pg_bin, free_port

    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc.message}")
    root = Path(tempfile.mkdtemp(prefix="ledger-metrics-"))
    os.chmod(root, 0o755)  # the cluster may run as another OS user (when we are root)
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {**_env(), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([*_ledger(), "serve", "--data-dir", str(root / "data"), "--port", str(port),
                                   "--workers", "2", "--no-worker"], stdout=out, stderr=subprocess.STDOUT, env=env)
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
        requests = 40
        for _ in range(requests):
            # A new connection each time, so that both processes get some.
            response = httpx.post(f"{url}/graphql", json={"query": "{ viewer { tenantId } }"},
                                  headers={"Authorization": f"Bearer {token}"}, timeout=10)
            assert response.status_code == 200
        assert _samples(url)[("ledger_graphql_requests_total", frozenset({("outcome", "ok")}))] == requests
        print("requests per process:", _requests_per_process(metrics_dir))
        # Each process's database pool (LEDGER_POOL_MAX is 20 by default), summed: whichever process
        # answers the scrape, it shows both.
        max_connections = ("ledger_db_pool_connections", frozenset({("state", "max")}))
        deadline = time.monotonic() + 10
        while (seen := _samples(url).get(max_connections)) != 2 * 20:
            assert time.monotonic() < deadline, seen
            time.sleep(0.2)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


def test_a_worker_process_serves_its_own_metrics(api, db_url):
    """`ledger worker --metrics-port`: a scale-out worker's attempts, queue and pool, scraped from it."""
    from test_cli_serve import _env, _ledger

    from ledger.db.cluster import free_port

    action_id = publish(api, tool("leaf", LEAF))
    execution_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $input: StartActionInput!) { actions {
        startAction(id: $id, input: $input) { executionId } } }""",
            {"id": action_id, "input": {"executionId": execution_id, "input": {"n": 4}}})
    port = free_port()
    # Per action, so that the attempt's series can be told from others (DESIGN 17: the operator's choice).
    worker = subprocess.Popen([*_ledger(), "worker", "--database-url", db_url, "--metrics-port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**_env(), "LEDGER_METRICS_PER_ACTION": "1"}, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert worker.poll() is None, worker.stdout.read()
            try:
                samples = _samples(f"http://127.0.0.1:{port}")
            except httpx.HTTPError:
                samples = {}
            if samples.get(("ledger_calls_total", frozenset({("kind", "tool"), ("action", "leaf"),
                                                              ("status", "SUCCEEDED"), ("code", "none")}))) == 1:
                break
            assert time.monotonic() < deadline, samples
            time.sleep(0.2)
        assert samples[("ledger_queue_claim_latency_seconds_count", frozenset())] == 1
        assert samples[("ledger_calls_per_tree_count", frozenset())] == 1
        assert samples[("ledger_db_pool_connections", frozenset({("state", "max")}))] > 0
    finally:
        worker.terminate()
        output, _ = worker.communicate(timeout=30)
    # Its log lines are JSON; the attempt's names the execution.
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    attempt = next(line for line in lines if line.get("logger") == "ledger.calls")
    assert (attempt["executionId"], attempt["rootExecutionId"], attempt["tenant"], attempt["action"]) == \
        (execution_id, execution_id, str(api.tenant_id), "leaf")
    assert attempt["outputBytes"] == len(b'{"n":8}') and attempt["durationMs"] > 0
