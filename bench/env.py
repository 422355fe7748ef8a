"""The bench's world: one throwaway PostgreSQL cluster (default durability), the ledger database, and the
processes under test (`ledger serve`, `ledger worker`), each started as a real command."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from ledger.db.cluster import EmbeddedCluster, find_pg_bin, free_port

ROOT = Path(__file__).resolve().parent.parent
LEDGER_DB = "ledger"
PGBENCH_DB = "pgbench"


def ledger_command(code_root: Path | None = None) -> list[str]:
    """`ledger`; with `code_root`, the ledger package of that directory (an exported baseline revision)."""
    if code_root is not None:
        return [sys.executable, "-m", "ledger.cli"]
    exe = ROOT / ".venv" / "bin" / "ledger"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ledger.cli"]


class Cluster:
    """An EmbeddedCluster with fsync and synchronous_commit on (PostgreSQL's defaults), and
    pg_stat_statements preloaded so that round trips can be counted."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ledger-bench-pg-"))
        os.chmod(self.root, 0o755)
        self.pg = EmbeddedCluster(self.root, durable=True)
        self.pg.ensure_initialized()
        with open(self.pg.data / "postgresql.conf", "a") as conf:
            conf.write("\n# bench\nshared_preload_libraries = 'pg_stat_statements'\n"
                       "pg_stat_statements.track = all\n")
        self.pg.start()
        self.bin = find_pg_bin()

    @property
    def admin_url(self) -> str:
        return self.pg.url()

    def url(self, dbname: str, user: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(self.pg.url(dbname), user=user)

    @property
    def postmaster_pid(self) -> int:
        return int((self.pg.data / "postmaster.pid").read_text().split()[0])

    def cpu(self) -> float:
        """CPU seconds of the postmaster and its processes now running (backends, WAL writer, checkpointer,
        autovacuum): read around a stretch whose backends live through it."""
        return cpu_seconds([self.postmaster_pid])

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def stop(self) -> None:
        self.pg.stop("immediate", wait_for_users=0)
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


def settings_text(cluster: Cluster) -> dict:
    with psycopg.connect(cluster.admin_url) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "server_version")}


# ---------------------------------------------------------------------------- statement counting


class Statements:
    """Statements executed per database role, from pg_stat_statements (BEGIN/COMMIT included)."""

    def __init__(self, cluster: Cluster, dbname: str) -> None:
        self.url = cluster.url(dbname)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def reset(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def count(self, role: str) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid"
                " WHERE r.rolname = %s AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (role,)).fetchone()
        return int(row[0])

    def top(self, role: str, limit: int = 12) -> list[dict]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT calls, round(total_exec_time::numeric, 1) AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 110)"
                " FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid"
                " WHERE r.rolname = %s AND s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " ORDER BY calls DESC LIMIT %s", (role, limit)).fetchall()
        return [{"calls": int(r[0]), "ms": float(r[1]), "query": r[2]} for r in rows]


class DurableCommits:
    """Commit records written to the WAL (pg_walinspect): one per transaction that wrote something, each a
    WAL flush the committer waits for with synchronous_commit on. Cluster-wide (autovacuum's ANALYZE
    included), so it is read around a stretch where only the processes under test write."""

    def __init__(self, cluster: Cluster, dbname: str) -> None:
        self.url = cluster.url(dbname)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    def position(self) -> str:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return str(conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0])

    def since(self, start: str) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return int(conn.execute(
                "SELECT count(*) FROM pg_get_wal_records_info(%s::pg_lsn, pg_current_wal_flush_lsn())"
                " WHERE resource_manager = 'Transaction' AND record_type IN ('COMMIT', 'COMMIT_PREPARED')",
                (start,)).fetchone()[0])


# ---------------------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, running now."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def sandbox_pids(cluster: "Cluster") -> list[int]:
    """This process's children but the cluster's postmaster (when this process started the cluster, the
    postmaster is one, and its backends are counted apart): the sandbox executors of an in-process app."""
    postmaster = cluster.postmaster_pid
    return [pid for pid in children(os.getpid()) if pid != postmaster]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes (and of their children still running, e.g. sandboxes)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids + [c for p in pids for c in children(p)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / ticks


def machine_busy_seconds() -> tuple[float, float]:
    """The whole machine's busy and total CPU seconds since boot, every CPU summed (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields[:8]) - idle) / ticks, sum(fields[:8]) / ticks


def wait_until_quiet(*, busy_fraction: float = 0.1, window: float = 0.5, timeout: float = 60.0) -> dict:
    """Wait until the machine's CPUs are at most `busy_fraction` busy over a `window`, or `timeout`.

    A timed row that follows load (the call tree follows thousands of money calls) otherwise starts while
    autovacuum, the checkpointer or a peer's garbage collector still run on the same two cores, and the
    tree (three processes handing over four times a read) suffers them more than its floor (two processes,
    two hand-overs): one run's repeats moved 3.6x-11x. Returns how long it waited and whether it settled."""
    started = time.monotonic()
    while True:
        busy, total = machine_busy_seconds()
        time.sleep(window)
        busy2, total2 = machine_busy_seconds()
        fraction = (busy2 - busy) / (total2 - total) if total2 > total else 0.0
        waited = time.monotonic() - started
        if fraction <= busy_fraction or waited >= timeout:
            return {"waited_s": round(waited, 1), "settled": fraction <= busy_fraction,
                    "busy_fraction": round(fraction, 3)}


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM of a process: its peak resident set size."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Process:
    """A command in its own process group, stopped by SIGTERM (then SIGKILL) of that group."""

    def __init__(self, argv: list[str], env: dict, log: Path, cwd: Path = ROOT) -> None:
        self.log = log
        self._logfile = open(log, "ab")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._logfile, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self._logfile.close()


HOOKS = ROOT / "bench" / "hooks"


class RoundTrips:
    """Database round trips of the processes under test, counted by bench/hooks/sitecustomize.py."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "roundtrips"
        self.dir.mkdir(parents=True, exist_ok=True)

    def total(self) -> int:
        time.sleep(0.3)  # each process writes its count every 0.1 s
        total = 0
        for path in self.dir.iterdir():
            if not path.name.endswith(".tmp"):
                try:
                    total += int(path.read_text() or 0)
                except (OSError, ValueError):
                    pass
        return total


def ledger_env(database_url: str, code_root: Path | None = None, roundtrips: RoundTrips | None = None,
               **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env["LEDGER_DATABASE_URL"] = database_url
    paths = [str(code_root)] if code_root is not None else []  # ahead of the editable install's finder
    if roundtrips is not None:
        paths.append(str(HOOKS))
        env["LEDGER_BENCH_ROUNDTRIPS"] = str(roundtrips.dir)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


class Server:
    """`ledger serve --workers N --no-worker` against the bench database."""

    def __init__(self, database_url: str, workdir: Path, workers: int = 2, code_root: Path | None = None,
                 roundtrips: RoundTrips | None = None, extra_env: dict | None = None) -> None:
        self.port = free_port()
        self.process = Process(
            [*ledger_command(code_root), "serve", "--workers", str(workers), "--no-worker", "--port", str(self.port),
             "--log-level", "warning"],
            ledger_env(database_url, code_root, roundtrips, **(extra_env or {})), workdir / f"serve-{self.port}.log",
            cwd=code_root or ROOT)
        self.workers = workers
        self._wait_ready()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/graphql"

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise RuntimeError(f"ledger serve exited:\n{self.process.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200 and len(self.worker_pids()) >= self.workers:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"ledger serve did not become ready:\n{self.process.log_tail()}")

    def worker_pids(self) -> list[int]:
        """The server processes (uvicorn's workers; the serve process itself with one worker)."""
        if self.workers <= 1:
            return [self.process.pid]
        # uvicorn's supervisor runs the workers as its children (a multiprocessing resource tracker too).
        pids = []
        for pid in children(self.process.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"resource_tracker" not in cmdline:
                pids.append(pid)
        return pids

    def cpu(self) -> float:
        return cpu_seconds(self.worker_pids())

    def peak_rss(self) -> dict:
        """Peak RSS of each server process, and of the sandbox executors it runs."""
        servers = [peak_rss_mib(pid) for pid in self.worker_pids()]
        sandboxes = [peak_rss_mib(child) for pid in self.worker_pids() for child in children(pid)]
        return {"server_mib": max((s for s in servers if s), default=None),
                "sandbox_mib": max((s for s in sandboxes if s), default=None)}

    def stop(self) -> None:
        self.process.stop()


class Workers:
    """`ledger worker` processes."""

    def __init__(self, database_url: str, workdir: Path, count: int, concurrency: int | None = None,
                 code_root: Path | None = None, roundtrips: RoundTrips | None = None) -> None:
        args = ["--concurrency", str(concurrency)] if concurrency else []
        tag = "base-" if code_root else ""
        self.processes = [Process([*ledger_command(code_root), "worker", *args],
                                  ledger_env(database_url, code_root, roundtrips),
                                  workdir / f"worker-{tag}{i}.log", cwd=code_root or ROOT) for i in range(count)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for p in self.processes:
                if not p.alive():
                    raise RuntimeError(f"ledger worker exited:\n{p.log_tail()}")
            if all(" running" in p.log.read_text(errors="replace") for p in self.processes):
                return
            time.sleep(0.1)
        raise RuntimeError("ledger worker did not start")

    def cpu(self) -> float:
        """CPU seconds of the worker processes and the sandboxes they run."""
        return cpu_seconds([p.pid for p in self.processes])

    def stop(self) -> None:
        for p in self.processes:
            p.stop()


# ---------------------------------------------------------------------------- a GraphQL client


class Client:
    """One keep-alive connection to a GraphQL endpoint."""

    def __init__(self, url: str, token: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def post(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}})
        self.conn.request("POST", self.path, body=body, headers=self.headers)
        response = self.conn.getresponse()
        return json.loads(response.read())

    def data(self, query: str, variables: dict | None = None) -> dict:
        result = self.post(query, variables)
        if result.get("errors"):
            raise RuntimeError(f"GraphQL error: {result['errors']}")
        return result["data"]

    def close(self) -> None:
        self.conn.close()


def export_revision(rev: str, dest: Path) -> Path:
    """The tree of a git revision (e.g. the code before an optimization), for a before/after run."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest
