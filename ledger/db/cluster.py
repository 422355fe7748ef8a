"""An embedded PostgreSQL cluster owned by the ledger: initdb on first use, started on demand.

PostgreSQL refuses to run as root, so when we are root the cluster runs as an unprivileged OS user
(`postgres` when it exists, else `nobody`) that owns the data directory. The server process is
started with PR_SET_PDEATHSIG (prctl, armed after dropping privileges) when we started it, so it
stops with us even when we are SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import LedgerError

_PREFIXES = ("/usr/lib/postgresql", "/usr/local/pgsql", "/opt/homebrew/opt", "/usr/pgsql")
SUPERUSER = "postgres"


class PostgresNotFound(LedgerError):
    code = "postgres_not_found"


def find_pg_bin() -> Path:
    """The directory holding `initdb`, `pg_ctl` and `postgres`."""
    candidates: list[Path] = []
    explicit = os.environ.get("LEDGER_PG_BIN")
    if explicit:
        candidates.append(Path(explicit))
    for prefix in _PREFIXES:
        base = Path(prefix)
        if base.is_dir():
            # Newest major version first.
            versions = sorted(
                (p for p in base.iterdir() if (p / "bin" / "postgres").exists()),
                key=lambda p: _version_key(p.name),
                reverse=True,
            )
            candidates.extend(v / "bin" for v in versions)
            if (base / "bin" / "postgres").exists():
                candidates.append(base / "bin")
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for cand in candidates:
        if (cand / "postgres").exists() and (cand / "initdb").exists() and (cand / "pg_ctl").exists():
            return cand
    raise PostgresNotFound(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) were found",
        hint="install the PostgreSQL 15+ server (Debian/Ubuntu: `apt-get install postgresql-15`; "
        "macOS: `brew install postgresql@15`), set LEDGER_PG_BIN to its bin directory, "
        "or point LEDGER_DATABASE_URL at an existing server",
    )


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in name.split("."))
    except ValueError:
        return (0,)


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise LedgerError("running as root and neither a `postgres` nor a `nobody` OS user exists",
                      code="postgres_user_missing", hint="create an unprivileged user to own the cluster")


def _demote(user: pwd.struct_passwd | None, *, die_with_parent: bool):
    parent = os.getpid()

    def preexec() -> None:
        os.setsid()
        if user is not None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        if die_with_parent:
            # After setuid: the kernel clears the parent-death signal when the credentials change.
            # SIGINT is PostgreSQL's fast shutdown (SIGTERM's smart one would wait for every client).
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT)
            if os.getppid() != parent:  # the parent died before the signal was armed
                os._exit(1)

    return preexec


def _chown_tree(path: Path, user: pwd.struct_passwd | None) -> None:
    if user is None:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, user.pw_uid, user.pw_gid)
        for f in files:
            os.chown(os.path.join(root, f), user.pw_uid, user.pw_gid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedCluster:
    """A PostgreSQL cluster in `<root>/data`, with its unix socket in `<root>/run`."""

    def __init__(self, root: Path, *, port: int | None = None, durable: bool = True) -> None:
        self.root = Path(root).resolve()
        self.data = self.root / "data"
        self.sockets = self.root / "run"
        self.log = self.root / "postgres.log"
        self.durable = durable
        self._port = port
        self._process: subprocess.Popen | None = None
        self._users: int | None = None  # the shared users.lock held while we use the cluster
        self._user = _run_as()

    # ------------------------------------------------------------------ lifecycle

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    @contextlib.contextmanager
    def _flock(self, name: str, operation: int = fcntl.LOCK_EX) -> Iterator[int]:
        """Hold a lock on `<root>/<name>` (one per data dir) while the block runs."""
        fd = self._open_lock(name)
        try:
            fcntl.flock(fd, operation)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _open_lock(self, name: str) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        return os.open(self.root / name, os.O_RDWR | os.O_CREAT, 0o600)

    def ensure_initialized(self) -> bool:
        """Run initdb once; True when this call created the cluster.

        Serialized between processes: a concurrent command waits for the initdb in progress instead
        of running its own into the same directory (or starting a half-made cluster).
        """
        with self._flock("init.lock"):
            return self._ensure_initialized()

    def _ensure_initialized(self) -> bool:
        if self.initialized:
            return False
        bin_dir = find_pg_bin()
        self.root.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(mode=0o700, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        _chown_tree(self.root, self._user)
        os.chmod(self.root, 0o755)
        result = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
             "-E", "UTF8", "--locale=C", "--no-instructions"],
            preexec_fn=_demote(self._user, die_with_parent=False),
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise LedgerError(f"initdb failed: {result.stderr.strip() or result.stdout.strip()}",
                              code="postgres_init_failed")
        port = self._port or free_port()
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {port}",
            f"unix_socket_directories = '{self.sockets}'",
            "max_connections = 200",
            "shared_buffers = 128MB",
        ]
        if not self.durable:
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# ledger\n" + "\n".join(settings) + "\n")
        return True

    @property
    def port(self) -> int:
        for line in reversed((self.data / "postgresql.conf").read_text().splitlines()):
            if line.strip().startswith("port ="):
                return int(line.split("=", 1)[1].strip())
        return 5432

    def is_running(self) -> bool:
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return False
        try:
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError, PermissionError):
            return False
        return (self.sockets / f".s.PGSQL.{self.port}").exists()

    def start(self, *, timeout: float = 30.0) -> bool:
        """Start the server unless one of this data dir runs already; True when we started it.

        The server we start dies with this process. Every process using the cluster holds a shared
        lock on `<root>/users.lock` until `stop()`; the starter stops the server only once it alone
        holds it, so a command that joined a running cluster is not cut off by its starter exiting.
        """
        self.ensure_initialized()
        with self._flock("start.lock"):
            if self._users is None:
                users = self._open_lock("users.lock")
                # Blocks while a starter is stopping the server; it is then gone and we start our own.
                fcntl.flock(users, fcntl.LOCK_SH)
                self._users = users
            deadline = time.monotonic() + timeout
            while self.is_running():
                # Joining: unless it is still starting, or shutting down after its starter died.
                if self._accepts_connections():
                    return False
                if time.monotonic() >= deadline:
                    raise LedgerError(f"the PostgreSQL server of {self.data} runs but accepts no connections",
                                      code="postgres_start_failed", hint=self._log_tail())
                time.sleep(0.1)
            return self._start(timeout)

    def _start(self, timeout: float) -> bool:
        bin_dir = find_pg_bin()
        self.sockets.mkdir(exist_ok=True)
        _chown_tree(self.sockets, self._user)
        if self._user is not None and self.log.exists():
            os.chown(self.log, self._user.pw_uid, self._user.pw_gid)
        stale = self.data / "postmaster.pid"
        if stale.exists():
            stale.unlink()
        logfile = open(self.log, "ab")
        self._process = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(self.data)],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_demote(self._user, die_with_parent=True),
        )
        logfile.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LedgerError(
                    f"PostgreSQL exited during start (status {self._process.returncode}); see {self.log}",
                    code="postgres_start_failed",
                    hint=self._log_tail(),
                )
            if self._accepts_connections():
                return True
            time.sleep(0.05)
        raise LedgerError(f"PostgreSQL did not start within {timeout:.0f}s; see {self.log}",
                          code="postgres_start_failed", hint=self._log_tail())

    def _accepts_connections(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])
        except OSError:
            return ""

    def stop(self, mode: str = "fast", *, wait_for_users: float = 10.0) -> None:
        """Stop the server if we started it, after the other users detached (at most `wait_for_users`
        seconds); in any case stop being a user."""
        signals = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
        proc = self._process
        users, self._users = self._users, None
        if proc is not None and proc.poll() is None and users is not None:
            deadline = time.monotonic() + wait_for_users
            while True:
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)  # only we still use it
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.05)
        try:
            self._stop(proc, signals[mode])
        finally:
            if users is not None:
                os.close(users)

    def _stop(self, proc: subprocess.Popen | None, stop_signal: int) -> None:
        if proc is not None and proc.poll() is None:
            proc.send_signal(stop_signal)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._process = None

    def url(self, dbname: str = "postgres") -> str:
        return f"host={self.sockets} port={self.port} user={SUPERUSER} dbname={dbname}"
