"""The queue worker: claims started executions in batches and runs each attempt in its own transaction.

- Claims run as one statement (`ledger_claim_executions`: UPDATE ... FOR UPDATE SKIP LOCKED), in batches,
  woken by LISTEN/NOTIFY with a polling fallback.
- Every claim carries a lease renewed by a heartbeat thread. A worker that dies stops renewing; its lease
  lapses within `lease_seconds` and another worker claims the execution again.
- The attempt commits only while its lease token still holds the queue row (the fence): an attempt whose
  lease was lost rolls back instead of writing over the retry's outcome.
- SIGTERM (stop): claim nothing more, finish what is held, release nothing half-done.
"""

from __future__ import annotations

import datetime
import logging
import os
import random
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from prometheus_client import Counter, Gauge, Histogram

from ..actions.registry import load_action
from ..auth.clients import client_layer
from ..auth.principal import Principal
from ..errors import Retryable
from ..logs import bind_call, unbind_call, update_call
from ..policy.chain import Chain
from ..scope import Scope
from ..metrics import observe_tree
from .drain import settle_pending_lifecycle
from .start import QUEUE_CHANNEL

log = logging.getLogger("ledger.worker")

TERMINAL_CODES = {"action_input_invalid", "action_access_denied", "action_call_limit_exceeded",
                  "tool_not_declared", "cancelled"}
MAX_BACKOFF_SECONDS = 300.0
# The advisory lock claims take turns on ("claim" in ASCII).
_CLAIM_LOCK = 0x636C61696D

QUEUE_DEPTH = Gauge("ledger_queue_depth", "Started executions waiting for or holding a worker",
                    multiprocess_mode="livemostrecent")
CLAIM_LATENCY = Histogram("ledger_queue_claim_latency_seconds", "From run_at (due) to claim")
ATTEMPTS = Counter("ledger_queue_attempts_total", "Attempts of started executions by outcome", ["outcome"])
RETRIES = Counter("ledger_queue_retries_total", "Attempts that will be retried")


class LeaseLost(Exception):
    """The attempt no longer holds its claim; its transaction must roll back."""


class Cancelled(Exception):
    """cancelExecution asked a running attempt to stop."""


@dataclass
class Job:
    tenant_id: uuid.UUID
    execution_id: uuid.UUID
    attempt: int
    lease_token: uuid.UUID
    run_at: datetime.datetime
    lease_seconds: float = 10.0
    lost: bool = False
    cancel: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def backoff_seconds(base: float, attempt: int) -> float:
    """Attempt n waits base * 2^(n-1), capped at five minutes."""
    return min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1)))


class Worker:
    def __init__(self, services: Any, *, concurrency: int = 4, lease_seconds: float = 10.0,
                 poll_interval: float = 1.0, name: str | None = None) -> None:
        self.services = services
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._running: dict[uuid.UUID, Job] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ledger-attempt")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "Worker":
        # What an attempt imports lazily (the engine, the GraphQL schema and strawberry behind graphql()),
        # imported once here: the first attempts start together on several threads, and concurrent first
        # imports of one package can fail with "partially initialized module" (a lost import race).
        from ..api import schema as _schema  # noqa: F401
        from ..executions import engine as _engine  # noqa: F401

        for target, name in ((self._claim_loop, "ledger-claim"), (self._listen_loop, "ledger-listen"),
                             (self._heartbeat_loop, "ledger-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Claim nothing more; wait for the attempts held to finish."""
        self._stopping.set()
        self._wake.set()
        self._pool.shutdown(wait=True, cancel_futures=False)
        for thread in self._threads:
            thread.join(timeout=timeout)

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ loops

    def _listen_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self.services.db.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {QUEUE_CHANNEL}")
                    self._wake.set()  # anything queued while we were not listening
                    while not self._stopping.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._wake.set()
            except psycopg.Error as exc:
                log.warning("queue LISTEN connection lost (%s); polling until it is back", exc)
                self._stopping.wait(1.0)

    def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                self._claim_and_dispatch()
            except Exception:  # noqa: BLE001 - the loop must survive database outages
                log.exception("claiming from the queue failed; retrying")
                self._stopping.wait(1.0)

    def _claim_and_dispatch(self) -> None:
        with self._lock:
            free = self.concurrency - len(self._running)
        if free <= 0:
            return
        with self.services.db.pool.connection() as conn:
            rows = claim(conn, self.name, free, self.lease_seconds)
            depth = conn.execute("SELECT ledger_queue_depth() AS depth").fetchone()["depth"]
        QUEUE_DEPTH.set(depth)
        now = datetime.datetime.now(datetime.timezone.utc)
        for row in rows:
            job = Job(row["tenant_id"], row["execution_id"], row["attempt"], row["lease_token"], row["run_at"],
                      lease_seconds=self.lease_seconds)
            CLAIM_LATENCY.observe(max(0.0, (now - row["run_at"]).total_seconds()))
            with self._lock:
                self._running[job.lease_token] = job
            self._pool.submit(self._run_job, job)
        if len(rows) == free:
            self._wake.set()  # there may be more

    def _heartbeat_loop(self) -> None:
        interval = self.lease_seconds / 3
        while not self._stopping.wait(interval) or self._running:
            with self._lock:
                tokens = list(self._running)
            if not tokens:
                if self._stopping.is_set():
                    return
                continue
            try:
                with self.services.db.pool.connection() as conn:
                    held = {r["lease_token"]: r["cancel_requested"] for r in conn.execute(
                        "SELECT * FROM ledger_renew_leases(%s, %s)", (tokens, self.lease_seconds)).fetchall()}
            except Exception:  # noqa: BLE001
                log.exception("renewing leases failed")
                continue
            with self._lock:
                for token in tokens:
                    job = self._running.get(token)
                    if job is None:
                        continue
                    if token not in held:
                        job.lost = True
                    elif held[token]:
                        job.cancel = True

    # ------------------------------------------------------------------ one attempt

    def _run_job(self, job: Job) -> None:
        # Every line logged about this attempt names its execution (a started execution is a root).
        log_context = bind_call(execution_id=job.execution_id, root_execution_id=job.execution_id,
                                tenant=job.tenant_id)
        try:
            outcome = run_attempt(self.services, job)
            _drop_lease(self.services, job)
            ATTEMPTS.labels(outcome).inc()
            if outcome == "retry":
                RETRIES.inc()
        except LeaseLost:
            ATTEMPTS.labels("lease_lost").inc()
            log.warning("lost the lease of execution %s; its attempt rolled back", job.execution_id)
        except Retryable as exc:
            # Transient (races lost race_retries times over, a database outage): expected, not a bug.
            ATTEMPTS.labels("retryable").inc()
            log.warning("attempt of execution %s was cut short (%s); it will be retried after its lease lapses",
                        job.execution_id, exc.message)
        except Exception:  # noqa: BLE001
            ATTEMPTS.labels("error").inc()
            log.exception("attempt of execution %s failed unexpectedly; it will be retried after its lease lapses",
                          job.execution_id)
        finally:
            unbind_call(log_context)
            with self._lock:
                self._running.pop(job.lease_token, None)
            job.done.set()
            self._wake.set()  # a slot is free: claim the next execution now, not at the next poll


def claim(conn: psycopg.Connection, worker: str, batch: int, lease_seconds: float) -> list[dict]:
    """Claim up to `batch` due executions for `worker` (an autocommit connection).

    Claims take turns. Two at once could both claim one execution: the second, finding the row just
    claimed (READ COMMITTED re-checks a locked row's new version), re-evaluates "no live lease" against
    its own older snapshot, which does not hold the first one's lease yet. After the lock, a claim is a
    statement of its own, so it sees every claim before it.
    """
    conn.execute("SELECT pg_advisory_lock(%s)", (_CLAIM_LOCK,))
    try:
        return conn.execute("SELECT * FROM ledger_claim_executions(%s, %s, %s)",
                            (worker, batch, lease_seconds)).fetchall()
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_CLAIM_LOCK,))


_EXECUTION_COLUMNS = ("tenant_id, id, action_id, action_version, status, attempts, client_id, client_claims, input,"
                      " event")


def _fence(conn: psycopg.Connection, job: Job) -> dict:
    """Lock our queue row; raise LeaseLost unless our lease token still holds it."""
    row = conn.execute(
        "SELECT q.lease_token, coalesce(l.cancel_requested, false) AS cancel_requested FROM execution_queue q"
        " LEFT JOIN execution_leases l ON l.lease_token = q.lease_token"
        " WHERE q.tenant_id = %s AND q.execution_id = %s FOR UPDATE OF q",
        (job.tenant_id, job.execution_id)).fetchone()
    if row is None or row["lease_token"] != job.lease_token or job.lost:
        raise LeaseLost()
    return row


def _release(conn: psycopg.Connection, job: Job, *, retry_in: float | None) -> None:
    """Give the queue row up: back to the queue after `retry_in` seconds, or gone for good.

    The lease row is dropped after the commit (`_drop_lease`): heartbeats update it while the attempt
    runs, so touching it inside the attempt's snapshot would be a serialization conflict.
    """
    if retry_in is None:
        conn.execute("DELETE FROM execution_queue WHERE tenant_id = %s AND execution_id = %s",
                     (job.tenant_id, job.execution_id))
    else:
        conn.execute(
            "UPDATE execution_queue SET run_at = now() + make_interval(secs => %s), lease_token = NULL,"
            " lease_owner = NULL WHERE tenant_id = %s AND execution_id = %s",
            (retry_in, job.tenant_id, job.execution_id),
        )


def run_attempt(services: Any, job: Job) -> str:
    """Run one attempt; returns 'succeeded', 'failed', 'retry' or 'cancelled'."""
    from ..executions.engine import CallTree, run_call
    from ..executions.records import flush

    deadline = time.monotonic() + services.settings.max_request_timeout
    # 1. Mark it RUNNING in a short transaction of its own, so that readers see it.
    with services.db.transaction(job.tenant_id, deadline=deadline) as conn:
        queue_row = _fence(conn, job)
        execution = conn.execute(f"SELECT {_EXECUTION_COLUMNS} FROM executions WHERE tenant_id = %s AND id = %s",
                                 (job.tenant_id, job.execution_id)).fetchone()
        if execution is None or execution["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            _release(conn, job, retry_in=None)
            return "stale"
        cancel_first = queue_row["cancel_requested"]
        attempt = execution["attempts"] + 1
        if not cancel_first:
            conn.execute("UPDATE executions SET status = 'RUNNING', attempts = %s, updated_at = now()"
                         " WHERE tenant_id = %s AND id = %s", (attempt, job.tenant_id, job.execution_id))
    if cancel_first:
        return _finish_cancelled(services, job, execution, deadline)

    # 2. The attempt itself, in its own transaction, committed only while the lease holds. A transaction
    #    that lost a race (a concurrent transfer on the same account) is run again at once, as the server
    #    does with a request, instead of waiting for the lease to lapse.
    for race in range(services.settings.race_retries + 1):
        started_at = datetime.datetime.now(datetime.timezone.utc)
        try:
            with services.db.transaction(job.tenant_id, deadline=deadline) as conn:
                # The starter's client row, read once for the authority check, the scope and the finish.
                client = _client(conn, execution)
                denial = _authority_problem(conn, execution, client)
                scope = _scope_for(services, conn, execution, deadline, client)
                record = load_action(scope, execution["action_id"], execution["action_version"])
                update_call(action=record["name"] if record else None)
                if denial is not None or record is None:
                    code, message, hint = denial or ("action_failure", "the action version no longer exists", None)
                    return _finish(conn, services, job, execution, attempt, record, None, started_at,
                                   error={"code": code, "message": message, "hint": hint}, scope=scope)
                tree = CallTree(scope)
                try:
                    pending = run_call(scope, tree, record, execution["input"], execution_id=job.execution_id,
                                       parent_execution_id=None, root_execution_id=job.execution_id,
                                       call_sequence=None, depth=0, deadline=deadline, event_type="action.started",
                                       attempt=attempt)
                finally:
                    tree.close()
                observe_tree(len(tree.pending))
                if job.cancel or _cancel_requested_now(services, job):
                    raise Cancelled()
                if len(tree.pending) > 1:  # the calls it made (the execution itself is written by _finish)
                    flush(scope, tree.pending[1:])
                return _finish(conn, services, job, execution, attempt, record, pending, started_at, scope=scope)
        except Cancelled:
            return _finish_cancelled(services, job, execution, deadline, started_at)
        except Retryable as exc:
            if not exc.race or race == services.settings.race_retries or time.monotonic() >= deadline or job.lost:
                raise
            time.sleep(random.uniform(0.001, min(0.2, 0.005 * 2**race)))
    raise AssertionError("unreachable")


def _drop_lease(services: Any, job: Job) -> None:
    with services.db.transaction(job.tenant_id) as conn:
        conn.execute("DELETE FROM execution_leases WHERE lease_token = %s", (job.lease_token,))


def _cancel_requested_now(services: Any, job: Job) -> bool:
    """A fresh look at the cancel flag: the attempt's own snapshot predates any cancel made while it ran."""
    with services.db.pool.connection() as conn:
        row = conn.execute("SELECT cancel_requested FROM ledger_renew_leases(%s, %s)",
                           ([job.lease_token], job.lease_seconds)).fetchone()
    return bool(row and row["cancel_requested"])


def load_action_for(services: Any, conn: psycopg.Connection, execution: dict) -> dict | None:
    scope = _scope_for(services, conn, execution, time.monotonic() + 30)
    return load_action(scope, execution["action_id"], execution["action_version"])


_UNREAD = object()


def _client(conn: psycopg.Connection, execution: dict) -> dict | None:
    return conn.execute("SELECT name, enabled, policies FROM clients WHERE tenant_id = %s AND id = %s",
                        (execution["tenant_id"], execution["client_id"])).fetchone()


def _authority_problem(conn: psycopg.Connection, execution: dict,
                       client: Any = _UNREAD) -> tuple[str, str, str] | None:
    """Authority carries over from the start: the starter's token must not have expired, nor its client
    been disabled. The client row is read fresh for every attempt (a cache of zero, within the 5 minutes
    the contract allows)."""
    claims = execution["client_claims"] or {}
    expires = claims.get("exp")
    if expires is not None and time.time() >= float(expires):
        return ("action_access_denied", "the credential this execution was started with expired",
                "the credential it was started with expired; start it again with a valid token")
    if client is _UNREAD:
        client = _client(conn, execution)
    if client is None or not client["enabled"]:
        return ("action_access_denied", "the client that started this execution was revoked",
                "enable the client, or start the execution again as another client")
    return None


def _scope_for(services: Any, conn: psycopg.Connection, execution: dict, deadline: float,
               client: Any = _UNREAD) -> Scope:
    if client is _UNREAD:
        client = _client(conn, execution)
    name = client["name"] if client else "revoked"
    principal = Principal(execution["tenant_id"], execution["client_id"], name, execution["client_claims"] or {})
    # The starter's layer, failing closed exactly as for a direct request.
    chain = Chain((client_layer(principal, client["policies"] if client else []),))
    return Scope(conn=conn, principal=principal, chain=chain, services=services, deadline=deadline)


def _finish(conn: psycopg.Connection, services: Any, job: Job, execution: dict, attempt: int, record: dict | None,
            pending: Any, started_at: datetime.datetime, error: dict | None = None, scope: Scope | None = None) -> str:
    from ..executions.records import record_json
    from ..metrics import call_finished, json_size

    _fence(conn, job)
    finished_at = datetime.datetime.now(datetime.timezone.utc)
    if pending is not None:
        error = pending.error
        output, tools, logs = pending.output, pending.tools, pending.logs
    else:
        output, tools, logs = None, [], []
    duration_ms = (finished_at - started_at).total_seconds() * 1000
    output_bytes = json_size(output if output is not None or error is None else error)
    conn.execute(
        "INSERT INTO invocations (tenant_id, execution_id, attempt, input, output, error, tools, logs, started_at,"
        " finished_at, duration_ms, output_bytes) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (job.tenant_id, job.execution_id, attempt, record_json(execution["input"]), record_json(output),
         record_json(error) if error else None, record_json(tools), record_json(logs), started_at, finished_at,
         duration_ms, output_bytes),
    )
    settings = (record or {}).get("execution") or {}
    max_attempts = int(settings.get("maxAttempts") or 3)
    if error is None:
        status, outcome = "SUCCEEDED", "succeeded"
    elif error["code"] in TERMINAL_CODES or attempt >= max_attempts:
        status, outcome = "FAILED", "failed"
    else:
        status, outcome = "QUEUED", "retry"
    conn.execute("UPDATE executions SET status = %s, updated_at = now() WHERE tenant_id = %s AND id = %s",
                 (status, job.tenant_id, job.execution_id))
    call_finished(job.tenant_id, execution_id=job.execution_id, root_execution_id=job.execution_id,
                  action=(record or {}).get("name"), action_version=execution["action_version"],
                  status="FAILED" if error else "SUCCEEDED", error=error, duration_ms=duration_ms,
                  output_bytes=output_bytes, attempt=attempt, depth=0, kind=(record or {}).get("kind"))
    if outcome == "retry":
        _release(conn, job, retry_in=backoff_seconds(float(settings.get("backoffSeconds", 1.0)), attempt))
    else:
        _release(conn, job, retry_in=None)
        settle_pending_lifecycle(scope or _scope_for(services, conn, execution, time.monotonic() + 30),
                                 execution["action_id"])
    return outcome


def _finish_cancelled(services: Any, job: Job, execution: dict, deadline: float,
                      started_at: datetime.datetime | None = None) -> str:
    from psycopg.types.json import Jsonb

    from ..metrics import call_finished, json_size

    with services.db.transaction(job.tenant_id, deadline=deadline) as conn:
        _fence(conn, job)
        attempt = execution["attempts"] + 1
        now = datetime.datetime.now(datetime.timezone.utc)
        started_at = started_at or now
        error = {"code": "cancelled", "message": "the execution was cancelled", "hint": None}
        duration_ms, output_bytes = (now - started_at).total_seconds() * 1000, json_size(error)
        conn.execute(
            "INSERT INTO invocations (tenant_id, execution_id, attempt, input, error, started_at, finished_at,"
            " duration_ms, output_bytes) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (job.tenant_id, job.execution_id, attempt, Jsonb(execution["input"]), Jsonb(error), started_at, now,
             duration_ms, output_bytes),
        )
        call_finished(job.tenant_id, execution_id=job.execution_id, root_execution_id=job.execution_id,
                      action=None, action_version=execution["action_version"], status="CANCELLED", error=error,
                      duration_ms=duration_ms, output_bytes=output_bytes, attempt=attempt, depth=0)
        conn.execute("UPDATE executions SET status = 'CANCELLED', updated_at = now() WHERE tenant_id = %s AND id = %s",
                     (job.tenant_id, job.execution_id))
        _release(conn, job, retry_in=None)
        settle_pending_lifecycle(_scope_for(services, conn, execution, deadline), execution["action_id"])
    return "cancelled"
