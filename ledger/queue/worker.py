"""The queue worker's loops: claim batches of due executions (woken by LISTEN/NOTIFY, with a polling
fallback), renew the leases of what it holds (a heartbeat thread), and run each attempt on a thread of
its own. Claims, leases and the fence are queue/claims.py; one attempt is queue/attempts.py.

SIGTERM (stop): claim nothing more, finish what is held, release nothing half-done.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from prometheus_client import Counter, Histogram

from ..errors import Retryable
from ..logs import bind_call, unbind_call
from ..metrics import QUEUE_DEPTH
from .attempts import raise_started_events, run_attempt
from .claims import Job, LeaseLost, claim, drop_leases
from .planned import settle_expired_plans
from .start import QUEUE_CHANNEL

log = logging.getLogger("ledger.worker")

CLAIM_LATENCY = Histogram("ledger_queue_claim_latency_seconds", "From run_at (due) to claim")
ATTEMPTS = Counter("ledger_queue_attempts_total", "Attempts of started executions by outcome", ["outcome"])
RETRIES = Counter("ledger_queue_retries_total", "Attempts that will be retried")

# How often the queue-depth gauge is read (one count over the whole queue).
DEPTH_INTERVAL = 1.0
# After a claim in a transaction met an execution of a tenant with triggers, claims go straight to a
# transaction (in which their events are raised) for this long, instead of first trying the one-statement
# claim of the executions no trigger can react to (queue/claims.py).
TRIGGERED_CLAIMS_FOR = 5.0
# While the queue holds more than the worker's last claim took, a slot that frees waits up to CLAIM_GATHER
# seconds for CLAIM_GATHER_SLOTS free slots (or as many as the worker has), so that attempts ending close
# together are refilled by one claim: each claim is a transaction that writes (one WAL commit record, ~0.5-1
# ms of PostgreSQL's time), and a claim faster than attempts end would otherwise take the slots one by one.
# It delays only work that is already waiting behind a full worker; a worker with no backlog claims at once.
CLAIM_GATHER = 0.003
CLAIM_GATHER_SLOTS = 2


class Worker:
    def __init__(self, services: Any, *, concurrency: int = 4, lease_seconds: float = 10.0,
                 poll_interval: float = 1.0, name: str | None = None, expiry_interval: float = 5.0,
                 claim_gather: float = CLAIM_GATHER) -> None:
        self.services = services
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        # How often the worker looks for planned actions past their expiry (DESIGN 14).
        self.expiry_interval = expiry_interval
        self.claim_gather = claim_gather
        # Whether the last claim took all it asked for (the queue may hold more).
        self._backlog = False
        self._next_expiry = 0.0
        self._next_depth = 0.0
        self._triggered_until = 0.0
        # The leases of attempts that ended, dropped with the next claim; the claim loop's own connection.
        self._finished: list[uuid.UUID] = []
        self._claim_conn: psycopg.Connection | None = None
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._running: dict[uuid.UUID, Job] = {}
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ledger-attempt")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "Worker":
        self._warm_executors()
        for target, name in ((self._claim_loop, "ledger-claim"), (self._listen_loop, "ledger-listen"),
                             (self._heartbeat_loop, "ledger-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _warm_executors(self) -> None:
        """Start as many sandbox executors as attempts run at once, before the first claim: leased and given
        back, they stay warm in the pool. Otherwise the first attempts would each wait for one to start
        (~130 ms of CPU and a quarter of a second each), and the pool would start only its default few."""
        try:
            pool = self.services.executor_pool()
            leases = []
            try:
                for _ in range(min(self.concurrency, pool.max_size)):
                    leases.append(pool.lease(timeout=pool.startup_timeout))
            finally:
                for lease in leases:
                    lease.release()
        except Exception:  # noqa: BLE001 - the attempts start executors themselves, or fail as they would
            log.warning("starting sandbox executors ahead of the first claim failed", exc_info=True)

    def stop(self, timeout: float = 30.0) -> None:
        """Claim nothing more; wait for the attempts held to finish."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            self._slot_freed.notify_all()  # a claim gathering slots claims nothing now
        self._pool.shutdown(wait=True, cancel_futures=False)
        for thread in self._threads:
            thread.join(timeout=timeout)
        with self._lock:
            finished, self._finished = self._finished, []
        try:
            if finished:
                with self.services.db.pool.connection() as conn:
                    drop_leases(conn, finished)
        except Exception:  # noqa: BLE001 - left behind, they lapse and the next claim anywhere drops them
            log.exception("dropping the leases of finished attempts failed")
        self._close_claim_conn()

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
                self._settle_expiry()
            except Exception:  # noqa: BLE001 - the loop must survive database outages
                log.exception("claiming from the queue failed; retrying")
                self._close_claim_conn()
                self._stopping.wait(1.0)

    def _connection(self) -> psycopg.Connection:
        """The claim loop's own connection: claims come often, and need no pool's check before each."""
        if self._claim_conn is None or self._claim_conn.closed:
            self._claim_conn = self.services.db.dedicated_connection()
        return self._claim_conn

    def _close_claim_conn(self) -> None:
        conn, self._claim_conn = self._claim_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def _settle_expiry(self) -> None:
        if time.monotonic() < self._next_expiry:
            return
        self._next_expiry = time.monotonic() + self.expiry_interval
        settle_expired_plans(self.services)

    def _free_slots(self) -> int:
        """The slots to claim for: under a backlog, once at least CLAIM_GATHER_SLOTS are free, or as many as
        freed within `claim_gather` seconds."""
        with self._lock:
            free = self.concurrency - len(self._running)
            wanted = min(CLAIM_GATHER_SLOTS, self.concurrency)
            if not self._backlog or free <= 0 or free >= wanted or self.claim_gather <= 0:
                return free
            deadline = time.monotonic() + self.claim_gather
            while free < wanted and not self._stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._slot_freed.wait(remaining)
                free = self.concurrency - len(self._running)
            return free

    def _claim_and_dispatch(self) -> None:
        free = self._free_slots()
        if free <= 0 or self._stopping.is_set():
            return
        with self._lock:
            finished, self._finished = self._finished, []
        conn = self._connection()
        try:
            rows = claim(conn, self.name, free, self.lease_seconds, finished=finished,
                         on_started=lambda c, claimed: raise_started_events(self.services, c, claimed),
                         untriggered_first=time.monotonic() >= self._triggered_until)
        except BaseException:
            with self._lock:
                self._finished.extend(finished)  # dropped with a later claim
            raise
        if time.monotonic() >= self._next_depth:
            self._next_depth = time.monotonic() + DEPTH_INTERVAL
            QUEUE_DEPTH.set(conn.execute("SELECT ledger_queue_depth() AS depth").fetchone()["depth"])
        if any(row.get("in_transaction") and row["triggers_version"] is not None for row in rows):
            self._triggered_until = time.monotonic() + TRIGGERED_CLAIMS_FOR
        now = datetime.datetime.now(datetime.timezone.utc)
        for row in rows:
            job = Job(row["tenant_id"], row["execution_id"], row["attempt"], row["lease_token"], row["run_at"],
                      lease_seconds=self.lease_seconds, started=row["started"])
            CLAIM_LATENCY.observe(max(0.0, (now - row["run_at"]).total_seconds()))
            with self._lock:
                self._running[job.lease_token] = job
            self._pool.submit(self._run_job, job)
        self._backlog = len(rows) == free
        if self._backlog:
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
            with self._lock:
                self._finished.append(job.lease_token)
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
                self._slot_freed.notify_all()
            job.done.set()
            self._wake.set()  # a slot is free: claim the next execution now, not at the next poll
