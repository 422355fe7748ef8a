"""The bench's queue row in one process: no-op executions run by one queue worker in this process.

    python -m bench.asgi_queue [--jobs 500] [--repeat 3] [--profile FILE]
    valgrind --tool=callgrind --instr-atstart=no python -m bench.asgi_queue --callgrind --jobs 200

Starts a throwaway cluster and `ledger serve` (only to create the bench's fixtures through the API, as
`make bench` does), then opens the services and starts a `Worker` in this process (the concurrency the
bench's `ledger worker` processes run with), and N times over starts `--jobs` executions of the no-op tool
in one transaction, as bench/workloads.py's `queue` does, and waits until every one is SUCCEEDED. It
prints, per execution, the best and the median of `--repeat` rounds of: this process's CPU (every
thread: the claim loop, the heartbeat, the attempts), the sandbox executors' and the PostgreSQL
processes' (from /proc, in clock ticks: use enough jobs).
`--profile FILE` keeps a cProfile (thread_time) of the attempts' threads (`run_attempt`) over one more round
(cProfile slows what it measures: read it for shares). `--callgrind`, under valgrind, counts this process's
instructions from the enqueue's commit until the last execution finished instead (one dump, `queue`):
deterministic up to the worker's polling, whatever else runs (the sandboxes are other processes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

import psycopg

from .env import Cluster, cpu_seconds, sandbox_pids
from .inprocess import populated

WORKER_CONCURRENCY = 4  # as bench/run.py's `ledger worker` processes


def _callgrind(*flags: str) -> None:
    import subprocess

    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


class _Queue:
    def __init__(self, services, fx) -> None:
        self.services, self.fx = services, fx
        self.poll = psycopg.connect(fx.database_url, autocommit=True)

    def round(self, jobs: int, *, before_commit=None, serial: "_SerialWorker | None" = None,
              poll_every: float = 0.02) -> None:
        """`jobs` no-op executions started in one transaction, waited for until all are SUCCEEDED (run by
        `serial` on this thread, if given). `before_commit()` runs just before that transaction's commit;
        `poll_every`: how often this thread counts what is left (its own instructions count under callgrind)."""
        from ledger.auth.clients import client_layer, load_principal
        from ledger.policy.chain import Chain
        from ledger.queue.start import start_action
        from ledger.scope import Scope

        fx = self.fx
        claims = {"tenant": str(fx.tenant_id), "sub": str(fx.client_id), "iat": int(time.time())}
        deadline = time.monotonic() + 600
        ids = [uuid.uuid4() for _ in range(jobs)]
        with self.services.db.transaction(fx.tenant_id, deadline=deadline) as conn:
            principal, policies = load_principal(conn, fx.tenant_id, fx.client_id, claims)
            scope = Scope(conn=conn, principal=principal, chain=Chain((client_layer(principal, policies),)),
                          services=self.services, deadline=deadline)
            for execution_id in ids:
                start_action(scope, uuid.UUID(fx.noop_tool), execution_id, None, {}, None)
            if before_commit is not None:
                before_commit()
        if serial is not None:
            serial.drain()
        started = time.monotonic()
        while True:
            time.sleep(poll_every)
            left = self.poll.execute("SELECT count(*) FROM execution_queue WHERE tenant_id = %s",
                                     (fx.tenant_id,)).fetchone()[0]
            if not left:
                break
            if time.monotonic() - started > 1200:
                raise RuntimeError("the worker did not finish in 20 minutes")
        done = self.poll.execute("SELECT count(*) FROM executions WHERE tenant_id = %s AND id = ANY(%s)"
                                 " AND status = 'SUCCEEDED'", (fx.tenant_id, ids)).fetchone()[0]
        if done != jobs:
            raise RuntimeError(f"{jobs - done} of {jobs} executions did not succeed")


class _SerialWorker:
    """The worker's claim and attempt, one execution at a time on the calling thread, with none of its
    threads (no heartbeat, no LISTEN, no polling): what one execution costs the worker, counted alike on
    every run. The claim is the worker's (`queue.claims.claim`, the leases of finished attempts dropped
    with the next), the attempt is `run_attempt`."""

    def __init__(self, services) -> None:
        from ledger.queue.worker import Worker

        self.services = services
        self.worker = Worker(services, concurrency=1)  # not started: only its settings and its warm-up
        self.worker._warm_executors()
        self.finished: list = []

    def drain(self) -> None:
        from ledger.queue import worker as worker_module  # its run_attempt, as `--profile` wraps it
        from ledger.queue.attempts import raise_started_events
        from ledger.queue.claims import Job, claim

        conn = self.worker._connection()
        while True:
            rows = claim(conn, self.worker.name, 1, self.worker.lease_seconds, finished=self.finished,
                         on_started=lambda c, claimed: raise_started_events(self.services, c, claimed),
                         untriggered_first=True)
            self.finished = []
            if not rows:
                return
            for row in rows:
                job = Job(row["tenant_id"], row["execution_id"], row["attempt"], row["lease_token"], row["run_at"],
                          lease_seconds=self.worker.lease_seconds, started=row["started"])
                worker_module.run_attempt(self.services, job)
                self.finished.append(job.lease_token)

    def stop(self) -> None:
        self.worker.stop()


def _profiled_attempts(path: str):
    """run_attempt wrapped to profile each attempt's thread (thread_time) into one cProfile."""
    import cProfile
    import threading

    from ledger.queue import worker as worker_module

    profiler = cProfile.Profile(time.thread_time)
    lock = threading.Lock()
    original = worker_module.run_attempt

    def profiled(*args, **kwargs):
        with lock:  # cProfile keeps one profile per thread at a time: the attempts take turns
            profiler.enable()
            try:
                return original(*args, **kwargs)
            finally:
                profiler.disable()

    worker_module.run_attempt = profiled

    def finish():
        worker_module.run_attempt = original
        profiler.dump_stats(path)

    return finish


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_queue")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=200, help="executions run first, not counted")
    parser.add_argument("--profile", help="a file for a cProfile of the attempts over one more round")
    parser.add_argument("--serial", action="store_true",
                        help="run the executions one at a time on the main thread (the worker's claim and attempt,"
                             " none of its threads): the same count on every run")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (run under `valgrind --tool=callgrind --instr-atstart=no`)")
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        fx, _server = populated(url, accounts=4, workdir_prefix="ledger-asgi-queue-")
        from ledger.config import Settings
        from ledger.queue.worker import Worker
        from ledger.wiring import open_services

        services = open_services(Settings(database_url=url), url)
        if args.serial:
            worker = serial = _SerialWorker(services)
        else:
            serial = None
            worker = Worker(services, concurrency=WORKER_CONCURRENCY, lease_seconds=Settings().lease_seconds).start()
        queue = _Queue(services, fx)
        try:
            queue.round(args.warmup if not args.callgrind else min(args.warmup, 30), serial=serial)
            if args.callgrind:
                _callgrind("-z")
                if serial is not None:
                    queue.round(args.jobs, serial=serial, before_commit=lambda: _callgrind("-i", "on"))
                else:
                    queue.round(args.jobs, before_commit=lambda: _callgrind("-i", "on"), poll_every=1.0)
                _callgrind("-i", "off")
                _callgrind("-d", "queue")
                print(f"callgrind: dump 'queue' ({args.jobs} executions; callgrind_annotate <file>,"
                      f" 'summary' / {args.jobs} = per execution)")
                return 0
            rows = {"process": [], "sandbox": [], "PostgreSQL": [], "wall": []}
            for r in range(args.repeat):
                executor_pids = sandbox_pids(cluster)
                before = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
                queue.round(args.jobs, serial=serial)
                after = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
                wall, process, sandbox, postgres = ((a - b) / args.jobs * 1e6 for a, b in zip(after, before))
                for key, value in zip(rows, (process, sandbox, postgres, wall)):
                    rows[key].append(value)
                print(f"round {r + 1}: process {process:.0f} µs, sandbox {sandbox:.0f}, PostgreSQL {postgres:.0f},"
                      f" wall {wall:.0f} µs per execution", flush=True)
            print("per execution (min / median of rounds): " + "; ".join(
                f"{key} {min(values):.0f} / {statistics.median(values):.0f} µs" for key, values in rows.items()))
            if args.profile:
                finish = _profiled_attempts(args.profile)
                queue.round(args.jobs, serial=serial)
                finish()
                print(f"cProfile of the attempts: {args.profile}")
        finally:
            worker.stop()
            services.close()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
