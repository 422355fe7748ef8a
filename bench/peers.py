"""The anchors, run on the same cluster: pgbench, PostGraphile 4 and graphile-worker 0.17.3.

The npm packages are installed into `.cache/bench-npm` when missing; when npm cannot reach the registry
(or Node is missing) the rows they anchor say "not measured".
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from .env import PGBENCH_DB, ROOT, Cluster, DurableCommits, Process, Statements, cpu_seconds, free_port

NPM_DIR = ROOT / ".cache" / "bench-npm"
NPM_PACKAGES = ("postgraphile@4", "graphile-worker@0.17.3")
POSTGRAPHILE_ROLE = "bench_postgraphile"
GRAPHILE_WORKER_ROLE = "bench_graphile_worker"


class NotMeasured(Exception):
    """An anchor that cannot run here; the row says why."""


# ---------------------------------------------------------------------------- pgbench


def pgbench_init(cluster: Cluster) -> None:
    cluster.create_database(PGBENCH_DB)
    _pgbench(cluster, ["-i", "-s", "1", "-q"], timeout=300)


def _pgbench(cluster: Cluster, args: list[str], timeout: float, cwd: str | None = None) -> str:
    pg = cluster.pg
    result = subprocess.run([str(cluster.bin / "pgbench"), *args, "-h", str(pg.sockets), "-p", str(pg.port),
                             "-U", "postgres", PGBENCH_DB], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout + result.stderr


def pgbench(cluster: Cluster, args: list[str], seconds: float) -> dict:
    """TPS (without connection time) and per-transaction latencies from pgbench's log (-l)."""
    with tempfile.TemporaryDirectory(prefix="pgbench-log-") as logs:
        out = _pgbench(cluster, [*args, "-T", str(max(1, round(seconds))), "-l", "--log-prefix",
                                 os.path.join(logs, "tx")], timeout=seconds + 120, cwd=logs)
        latencies = []
        for path in glob.glob(os.path.join(logs, "tx*")):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3:
                        latencies.append(int(parts[2]) / 1000)
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if not match:
        raise RuntimeError(f"unexpected pgbench output: {out}")
    latencies.sort()
    return {"tps": round(float(match.group(1)), 1), "transactions": len(latencies),
            "p50_ms": round(_centile(latencies, 50), 3), "p99_ms": round(_centile(latencies, 99), 3),
            "args": " ".join(args)}


def _centile(samples: list[float], p: float) -> float:
    if not samples:
        return 0.0
    return samples[min(len(samples) - 1, max(0, round(p / 100 * len(samples)) - 1))]


# ---------------------------------------------------------------------------- npm peers


def npm_ready(log: Path) -> Path:
    """node_modules with the peers, installed on first use; NotMeasured when that cannot be done."""
    modules = NPM_DIR / "node_modules"
    if all((modules / name.rsplit("@", 1)[0] / "package.json").exists() for name in NPM_PACKAGES):
        return modules
    if not shutil.which("node") or not shutil.which("npm"):
        raise NotMeasured("Node.js and npm are not installed")
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    if not (NPM_DIR / "package.json").exists():
        (NPM_DIR / "package.json").write_text('{"name": "ledger-bench-peers", "private": true}\n')
    try:
        result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *NPM_PACKAGES],
                                cwd=NPM_DIR, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise NotMeasured("npm install timed out (is the npm registry reachable?)") from None
    log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise NotMeasured(f"npm install failed (is the npm registry reachable?): "
                          f"{(result.stderr.strip().splitlines() or ['?'])[-1]}")
    return modules


def _node_env(cluster: Cluster, user: str, database: str, **extra) -> dict:
    env = dict(os.environ)
    env["NODE_PATH"] = str(NPM_DIR / "node_modules")
    env["NODE_ENV"] = "production"
    env["BENCH_PG"] = json.dumps({"host": str(cluster.pg.sockets), "port": cluster.pg.port, "user": user,
                                  "database": database, **extra.pop("pg", {})})
    env.update(extra)
    return env


def _create_login_role(cluster: Cluster, dbname: str, role: str, *, member_of: str | None = None,
                       create_on_db: bool = False) -> None:
    with psycopg.connect(cluster.url(dbname), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(role)))
        if member_of:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(member_of), sql.Identifier(role)))
        if create_on_db:
            conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(dbname),
                                                                               sql.Identifier(role)))


class PostGraphile:
    """PostGraphile 4 on the ledger database, as a role subject to RLS, the tenant from the bearer token."""

    QUERY = "query($t: UUID!, $id: UUID!) { accountByTenantIdAndId(tenantId: $t, id: $id) { balance } }"

    def __init__(self, cluster: Cluster, dbname: str, jwt_secret: str, workdir: Path) -> None:
        npm_ready(workdir / "npm.log")
        _create_login_role(cluster, dbname, POSTGRAPHILE_ROLE, member_of="ledger_app")
        self.port = free_port()
        env = _node_env(cluster, POSTGRAPHILE_ROLE, dbname, pg={"listen": self.port}, BENCH_JWT_SECRET=jwt_secret)
        self.process = Process(["node", str(ROOT / "bench" / "postgraphile.js")], env, workdir / "postgraphile.log")
        deadline = time.monotonic() + 90
        while "listening" not in self.process.log.read_text(errors="replace"):
            if not self.process.alive() or time.monotonic() > deadline:
                self.process.stop()
                raise NotMeasured(f"PostGraphile did not start: {self.process.log_tail(5)}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    def cpu(self) -> float:
        """CPU seconds of the Node process so far."""
        return cpu_seconds([self.process.pid])

    def body(self, tenant_id, account_id) -> str:
        return json.dumps({"query": self.QUERY, "variables": {"t": str(tenant_id), "id": account_id}})

    def read(self, token: str, tenant_id, account_id) -> dict:
        return self._post(token, self.body(tenant_id, account_id))

    # The custom mutation over bench/fixtures.py's bench_transfer (amount 1, as the ledger's money call).
    TRANSFER = ("mutation($input: BenchTransferInput!) { benchTransfer(input: $input) { transfer { id } } }")

    def transfer_template(self) -> str:
        """The mutation's body for the load generator: a fresh transfer id and two random accounts each time."""
        return json.dumps({"query": self.TRANSFER, "variables": {"input": {
            "transferId": "__UUID__", "fromId": "__FROM__", "toId": "__TO__", "amountMoved": "1"}}},
            separators=(",", ":"))

    def transfer(self, token: str, transfer_id: str, from_id: str, to_id: str, amount: int = 1) -> dict:
        return self._post(token, json.dumps({"query": self.TRANSFER, "variables": {"input": {
            "transferId": transfer_id, "fromId": from_id, "toId": to_id, "amountMoved": str(amount)}}}))

    def _post(self, token: str, body: str) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", "/graphql", body=body,
                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        self.process.stop()


class GraphileWorker:
    """graphile-worker processes on a database of their own schema, with a no-op task."""

    def __init__(self, cluster: Cluster, dbname: str, workdir: Path, processes: int, concurrency: int) -> None:
        npm_ready(workdir / "npm.log")
        _create_login_role(cluster, dbname, GRAPHILE_WORKER_ROLE, create_on_db=True)
        self.url = cluster.url(dbname)
        env = _node_env(cluster, GRAPHILE_WORKER_ROLE, dbname)
        script = str(ROOT / "bench" / "graphile_worker.js")
        migrate = subprocess.run(["node", script, "migrate"], env=env, capture_output=True, text=True, timeout=120)
        if migrate.returncode != 0:
            raise NotMeasured(f"graphile-worker could not install its schema: {migrate.stderr.strip()[-300:]}")
        self.processes = [Process(["node", script, str(concurrency)], env, workdir / f"graphile-worker-{i}.log")
                          for i in range(processes)]
        deadline = time.monotonic() + 60
        while not all("running" in p.log.read_text(errors="replace") for p in self.processes):
            if time.monotonic() > deadline or not all(p.alive() for p in self.processes):
                self.stop()
                raise NotMeasured(f"graphile-worker did not start: {self.processes[0].log_tail(5)}")
            time.sleep(0.1)

    def run_jobs(self, n: int, stats: Statements | None = None, commits: DurableCommits | None = None) -> dict:
        """Enqueue n no-op jobs in one transaction; the time from its commit until none is left (and the
        durable commits per job, the enqueue's taken off)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            table = "graphile_worker._private_jobs" if conn.execute(
                "SELECT to_regclass('graphile_worker._private_jobs')").fetchone()[0] else "graphile_worker.jobs"
            wal_start = commits.position() if commits is not None else None
            with conn.transaction():
                conn.execute("SELECT graphile_worker.add_job('noop', json_build_object('i', i))"
                             " FROM generate_series(1, %s) AS i", (n,))
            committed = time.perf_counter()
            if stats is not None:
                stats.reset()
            left = n
            while left:
                time.sleep(0.01)
                left = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                if time.perf_counter() - committed > 600:
                    raise RuntimeError("graphile-worker did not finish its jobs in 10 minutes")
            elapsed = time.perf_counter() - committed
            durable = commits.since(wal_start) - 1 if commits is not None else None
        return {"jobs": n, "seconds": round(elapsed, 3), "jobs_per_s": round(n / elapsed, 1),
                "durable_commits_per_job": round(durable / n, 2) if durable is not None else None}

    def stop(self) -> None:
        for p in self.processes:
            p.stop()


def new_uuid() -> str:
    return str(uuid.uuid4())
