"""The deployment shape, for fault and load tests: an external PostgreSQL cluster the test controls,
`ledger serve --no-worker --workers N` and M `ledger worker` processes, all started as real processes.

The cluster is a dedicated EmbeddedCluster in a temporary directory (not the suite's shared one), so a
test may stop it with `-m immediate` and start it again. It is durable (fsync on, synchronous commit):
an acknowledged commit must survive the crash.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from ledger.auth.clients import create_tenant
from ledger.auth.tokens import TokenService, load_signing_key
from ledger.db.cluster import EmbeddedCluster, free_port
from ledger.db.migrate import apply_migrations

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "ledger"


def ledger_command() -> list[str]:
    script = Path(sys.executable).parent / "ledger"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ledger.cli"]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ppid(int(entry.name)) == pid and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(p / 100 * (len(ordered) - 1)))))
    return ordered[index]


@dataclass
class Tenant:
    tenant_id: uuid.UUID
    client_id: uuid.UUID
    token: str


class Process:
    """One `ledger` command run as a child process, its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        with open(log, "ab") as out:
            self.popen = subprocess.Popen([*ledger_command(), *args], env=env, cwd=ROOT, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 20) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reap_group()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)
        self._reap_group()

    def _reap_group(self) -> None:
        # Whatever it left behind in its own session (server children, executors): ours to end.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Deployment:
    """A cluster, `servers` server processes behind one port, and `workers` worker processes."""

    def __init__(self, root: Path | None = None, *, servers: int = 2, workers: int = 2,
                 env: dict[str, str] | None = None, worker_env: dict[str, str] | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="ledger-deploy-"))
        os.chmod(self.root, 0o755)  # the cluster may run as another OS user (when we are root)
        self.cluster = EmbeddedCluster(self.root / "pg", durable=True)
        self.cluster.start()
        admin = self.cluster.url()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        self.url = self.cluster.url(DATABASE)
        apply_migrations(self.url)
        self.tokens = TokenService(load_signing_key(self.url))
        self.server_count = servers
        self.extra_env = dict(env or {})
        self.worker_env = dict(worker_env or {})
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.server: Process | None = None
        self.workers: list[Process] = []
        self._logs = self.root / "logs"
        self._logs.mkdir(exist_ok=True)
        self.start_server()
        for _ in range(workers):
            self.start_worker()

    # ------------------------------------------------------------------ processes

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_") or k == "LEDGER_PG_BIN"}
        env.update({"PYTHONUNBUFFERED": "1", "LEDGER_DATABASE_URL": self.url,
                    "LEDGER_DATA_DIR": str(self.root / "data"), "LEDGER_LEASE_SECONDS": "3"})
        env.update(self.extra_env)
        env.update(extra or {})
        return env

    def start_server(self) -> None:
        args = ["serve", "--no-worker", "--port", str(self.port), "--log-level", "warning"]
        if self.server_count > 1:
            args += ["--workers", str(self.server_count)]
        self.server = Process(args, self.env(), self._logs / f"serve-{time.monotonic_ns()}.log")
        wait_until(self._serving, 60, f"the servers to answer (log: {self.server.log})", interval=0.1)

    def _serving(self) -> bool:
        if not self.server.running():
            raise AssertionError(f"`ledger serve` exited: {self.server.output()}")
        if len(self.server_pids()) < self.server_count:
            return False
        return self.healthz() == 200

    def server_pids(self) -> list[int]:
        """The processes answering requests: uvicorn's worker processes, or the serve process itself."""
        if self.server is None:
            return []
        if self.server_count == 1:
            return [self.server.pid]
        return [pid for pid in children(self.server.pid)
                if "multiprocessing" in cmdline(pid) and "resource_tracker" not in cmdline(pid)]

    def start_worker(self) -> Process:
        worker = Process(["worker", "--concurrency", "2"], self.env(self.worker_env),
                         self._logs / f"worker-{time.monotonic_ns()}.log")
        wait_until(lambda: "running" in worker.output() or not worker.running(), 60, "a worker to start")
        assert worker.running(), worker.output()
        self.workers.append(worker)
        return worker

    def ensure_workers(self, count: int) -> None:
        self.workers = [w for w in self.workers if w.running()]
        while len(self.workers) < count:
            self.start_worker()

    def worker_pid_of(self, execution_id: str) -> int | None:
        """The pid of the worker holding an execution's lease (worker names are host:pid:suffix)."""
        with self.owner() as conn:
            row = conn.execute("SELECT lease_owner FROM execution_queue WHERE execution_id = %s",
                               (execution_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        return int(row[0].split(":")[1])

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        if self.server is not None:
            self.server.stop()
        self.cluster.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ database and tenants

    def owner(self) -> psycopg.Connection:
        """A connection as the owner role (sees every tenant: for checking invariants)."""
        return psycopg.connect(self.url, autocommit=True)

    def tenant(self, name: str = "acme") -> Tenant:
        tenant_id, client_id = create_tenant(self.url, name)
        token, _ = self.tokens.mint(tenant_id, client_id)
        return Tenant(tenant_id, client_id, token)

    # ------------------------------------------------------------------ HTTP

    def healthz(self, timeout: float = 5) -> int:
        try:
            return httpx.get(f"{self.base}/healthz", timeout=timeout).status_code
        except httpx.HTTPError:
            return 0

    def client(self, tenant: Tenant, timeout: float = 60) -> "Client":
        return Client(self.base, tenant.token, timeout)


class Client:
    """One HTTP connection (keep-alive) to the servers, as one tenant's client."""

    def __init__(self, base: str, token: str, timeout: float = 60) -> None:
        self.http = httpx.Client(base_url=base, timeout=timeout,
                                 headers={"Authorization": f"Bearer {token}"})

    def post(self, query: str, variables: dict | None = None, headers: dict | None = None) -> httpx.Response:
        return self.http.post("/graphql", json={"query": query, "variables": variables or {}}, headers=headers)

    def gql(self, query: str, variables: dict | None = None, headers: dict | None = None) -> dict:
        response = self.post(query, variables, headers)
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        return body["data"]

    def close(self) -> None:
        self.http.close()


# ---------------------------------------------------------------------------- the ledger's invariants


def balances(conn: psycopg.Connection, tenant_id: uuid.UUID) -> dict[str, tuple[str, int, bool]]:
    return {str(r[0]): (r[1], r[2], r[3]) for r in conn.execute(
        "SELECT id, currency, balance, allow_overdraft FROM accounts WHERE tenant_id = %s", (tenant_id,))}


def check_money_invariants(conn: psycopg.Connection, tenant_id: uuid.UUID) -> dict[str, Any]:
    """Zero-sum per currency, no negative balance without overdraft, and every balance equal to the sum
    of its transfers (no transfer moved money on one side only). Returns the counts it checked."""
    accounts = balances(conn, tenant_id)
    per_currency: Counter = Counter()
    for currency, amount, _ in accounts.values():
        per_currency[currency] += amount
    assert all(total == 0 for total in per_currency.values()), per_currency
    negative = {a: b for a, (_, b, overdraft) in accounts.items() if b < 0 and not overdraft}
    assert negative == {}, negative
    derived: Counter = Counter()
    transfers = conn.execute("SELECT from_account_id, to_account_id, amount, currency FROM transfers"
                             " WHERE tenant_id = %s", (tenant_id,)).fetchall()
    for source, target, amount, currency in transfers:
        derived[str(source)] -= amount
        derived[str(target)] += amount
        assert accounts[str(source)][0] == currency == accounts[str(target)][0]
    mismatched = {a: (b, derived[a]) for a, (_, b, _) in accounts.items() if b != derived[a]}
    assert mismatched == {}, mismatched
    return {"accounts": len(accounts), "transfers": len(transfers), "currencies": dict(per_currency)}


# ---------------------------------------------------------------------------- traffic


@dataclass
class Outcome:
    """What one request got: `ok`, an error code, or `transport` (no answer); and how long it took."""

    kind: str
    seconds: float
    status: int = 0
    body: dict | None = None
    started: float = 0.0  # time.monotonic() when it was sent


def classify(response: httpx.Response) -> str:
    if response.status_code >= 500:
        return f"http_{response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return f"http_{response.status_code}_not_json"
    errors = body.get("errors")
    if errors:
        return (errors[0].get("extensions") or {}).get("code") or "no_code"
    return "ok"


def timed(call) -> Outcome:
    started = time.monotonic()
    try:
        response = call()
    except httpx.HTTPError as exc:
        return Outcome("transport", time.monotonic() - started, body={"error": repr(exc)}, started=started)
    seconds = time.monotonic() - started
    try:
        body = response.json()
    except ValueError:
        body = None
    return Outcome(classify(response), seconds, response.status_code, body, started)


@dataclass
class Stats:
    outcomes: list[tuple[str, Outcome]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, label: str, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append((label, outcome))

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(o.kind for _, o in self.outcomes))

    def latencies(self, label: str | None = None) -> list[float]:
        return [o.seconds for lbl, o in self.outcomes if label is None or lbl == label]

    def summary(self, seconds: float) -> dict[str, Any]:
        all_latencies = self.latencies()
        return {
            "requests": len(self.outcomes),
            "throughput_per_s": round(len(self.outcomes) / seconds, 1),
            "by_outcome": self.by_kind(),
            "p50_ms": round(statistics.median(all_latencies) * 1000, 1) if all_latencies else None,
            "p99_ms": round(percentile(all_latencies, 99) * 1000, 1) if all_latencies else None,
        }


def serve(database_url: str, directory: Path, env: dict[str, str] | None = None) -> tuple[Process, str]:
    """One `ledger serve --no-worker` process against a database; returns it and its base URL."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_") or k == "LEDGER_PG_BIN"}
    full_env.update({"PYTHONUNBUFFERED": "1", "LEDGER_DATABASE_URL": database_url,
                     "LEDGER_DATA_DIR": str(directory / "data")})
    full_env.update(env or {})
    process = Process(["serve", "--no-worker", "--port", str(port), "--log-level", "warning"], full_env,
                      directory / f"serve-{port}.log")
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if not process.running():
            raise AssertionError(f"`ledger serve` exited: {process.output()}")
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, f"`ledger serve` to answer (log: {process.log})", interval=0.1)
    except BaseException:
        process.stop()
        raise
    return process, base


def unexpected_failures(process: Process) -> list[str]:
    """What a worker logged about attempts that failed unexpectedly: each message and its exception's end."""
    import json

    found = []
    for line in process.output().splitlines():
        if "failed unexpectedly" in line:
            try:
                entry = json.loads(line)
                found.append(f"{entry.get('message')}: ...{(entry.get('exception') or '')[-600:]}")
            except ValueError:
                found.append(line[-800:])
    return found
