"""Faults on the deployment shape: an external cluster, `ledger serve --no-worker --workers 2` and two
`ledger worker` processes. A worker and a server process are killed with SIGKILL, PostgreSQL is stopped
with `-m immediate` under load, a connection pool is exhausted; nothing acknowledged is lost, no transfer
is partial, and no request hangs past its deadline.

The tests share one deployment (starting it costs seconds); each works in a tenant of its own and first
puts the deployment back in shape (two workers, the servers answering).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid

import pytest

from invoke_helpers import tool
from reliability import ops
from reliability.deployment import (Client, Deployment, Outcome, Process, Stats, check_money_invariants, percentile,
                                    timed, wait_until)
from test_queue_recovery import SLOW_TRANSFER

ECHO = 'def run(event):\n    return {"echo": event["data"]}\n'


def in_shape(deployment: Deployment) -> Deployment:
    """The deployment as the shape says: the servers answer, two workers run."""
    wait_until(lambda: deployment.healthz() == 200 and len(deployment.server_pids()) == 2, 30, "the servers")
    deployment.ensure_workers(2)
    return deployment


@pytest.fixture
def shape(deployment):
    return in_shape(deployment)


def _transferred(deployment, tenant_id, ids) -> set[str]:
    with deployment.owner() as conn:
        rows = conn.execute("SELECT id::text FROM transfers WHERE tenant_id = %s AND id = ANY(%s::uuid[])",
                            (tenant_id, list(ids))).fetchall()
    return {r[0] for r in rows}


# ---------------------------------------------------------------------------- (a) a worker killed mid-attempt


def test_a_worker_killed_mid_attempt_is_completed_by_the_other_worker_exactly_once(shape):
    """As tests/test_queue_recovery.py, on the deployment shape: the other worker is already running and
    takes the execution over when the killed one's lease lapses."""
    tenant = shape.tenant("worker-kill")
    client = shape.client(tenant)
    opening = ops.create_account(client, "opening", overdraft=True)
    funded = ops.create_account(client, "funded")
    flag = ops.create_account(client, "flag")
    ops.transfer(client, opening, flag, 500)
    action_id = ops.publish(client, tool("slow_transfer", SLOW_TRANSFER, timeout_ms=120_000))
    transfer_id = str(uuid.uuid4())
    execution_id = ops.start(client, action_id, {"id": transfer_id, "f": opening, "t": funded, "flag": flag})
    ops.wait_for_execution(client, execution_id, statuses=("RUNNING",), timeout=30)
    holder = wait_until(lambda: shape.worker_pid_of(execution_id), 10, "the lease owner")
    victim = next(w for w in shape.workers if w.pid == holder)
    time.sleep(0.5)  # inside the attempt: the transfer is made (uncommitted), the loop spins
    victim.kill()
    assert ops.balance(client, funded) == 0  # the killed attempt's write never committed
    ops.transfer(client, flag, opening, 500)  # the retry will not spin
    done = ops.wait_for_execution(client, execution_id, timeout=60)
    assert done["status"] == "SUCCEEDED", done
    assert done["attempts"] >= 2, done
    assert _transferred(shape, tenant.tenant_id, [transfer_id]) == {transfer_id}
    assert ops.balance(client, funded) == 7
    with shape.owner() as conn:
        check_money_invariants(conn, tenant.tenant_id)
    client.close()


# ---------------------------------------------------------------------------- (b) a server killed in a burst


def _burst(deployment, tenant, accounts, stop: threading.Event, results: list, lock: threading.Lock) -> None:
    client = deployment.client(tenant, timeout=30)
    rng = random.Random()
    try:
        while not stop.is_set():
            x, y, z = rng.sample(accounts, 3)
            ids = (str(uuid.uuid4()), str(uuid.uuid4()))
            outcome = timed(lambda: client.post(ops.TWO_TRANSFERS, {"a": ids[0], "b": ids[1], "x": x, "y": y, "z": z,
                                                                   "amount": rng.randint(1, 100)}))
            with lock:
                results.append((ids, outcome))
            if outcome.kind == "transport":
                client.close()  # the connection went with the killed process: a new one
                client = deployment.client(tenant, timeout=30)
    finally:
        client.close()


def test_a_server_killed_during_a_burst_of_transfers_loses_nothing_acknowledged(shape):
    tenant = shape.tenant("server-kill")
    setup = shape.client(tenant)
    _, accounts = ops.funded_accounts(setup, 10, 1_000_000)
    setup.close()
    stop, lock, results = threading.Event(), threading.Lock(), []
    threads = [threading.Thread(target=_burst, args=(shape, tenant, accounts, stop, results, lock)) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(results) >= 40, 30, "the burst to get going")
        victim = random.choice(shape.server_pids())
        os.kill(victim, signal.SIGKILL)
        killed_at = len(results)
        time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    requests = [ids for ids, _ in results]
    acknowledged = [ids for ids, outcome in results if outcome.kind == "ok"]
    kinds = {}
    for _, outcome in results:
        kinds[outcome.kind] = kinds.get(outcome.kind, 0) + 1
    present = _transferred(shape, tenant.tenant_id, [i for pair in requests for i in pair])
    assert all(a in present and b in present for a, b in acknowledged), "an acknowledged transfer is missing"
    partial = [(a, b) for a, b in requests if (a in present) != (b in present)]
    assert partial == []
    assert all(not k.startswith("http_5") for k in kinds), kinds
    with shape.owner() as conn:
        checked = check_money_invariants(conn, tenant.tenant_id)
    unanswered = [ids for ids, outcome in results if outcome.kind == "transport"]
    print(f"\nserver SIGKILL burst: {len(results)} requests ({killed_at} before the kill), outcomes {kinds}; "
          f"of the {len(unanswered)} cut off, {sum(a in present for a, _ in unanswered)} had committed (whole); "
          f"{checked}")
    assert any(outcome.kind == "ok" for _, outcome in results[killed_at:])  # the burst carried on after the kill
    # The supervisor replaces the killed process; the servers answer again.
    wait_until(lambda: len(shape.server_pids()) == 2 and victim not in shape.server_pids(), 30,
               "the killed server process to be replaced")
    assert shape.healthz() == 200


# ---------------------------------------------------------------------------- (c) PostgreSQL stopped under load


REQUEST_TIMEOUT = 5.0


def _load(deployment, tenant, accounts, action_id, stop: threading.Event, stats: Stats, acked: dict,
          kind: str) -> None:
    client = deployment.client(tenant, timeout=REQUEST_TIMEOUT + 30)
    headers = {"Request-Timeout": str(REQUEST_TIMEOUT)}
    rng = random.Random()
    try:
        while not stop.is_set():
            if kind == "transfer":
                source, target = rng.sample(accounts, 2)
                transfer_id = str(uuid.uuid4())
                outcome = timed(lambda: client.post(ops.CREATE_TRANSFER, {
                    "id": transfer_id, "from": source, "to": target, "amount": rng.randint(1, 10)}, headers))
                if outcome.kind == "ok":
                    acked["transfers"].append(transfer_id)
            elif kind == "start":
                query, variables = ops.start_body(action_id, {"n": 1})
                outcome = timed(lambda: client.post(query, variables, headers))
                if outcome.kind == "ok":
                    acked["starts"].append(variables["input"]["executionId"])
            else:
                outcome = timed(lambda: client.post(ops.ACCOUNT, {"id": rng.choice(accounts)}, headers))
            stats.add(kind, outcome)
            time.sleep(0.02)
    finally:
        client.close()


def _poll_healthz(deployment, stop: threading.Event, stats: Stats) -> None:
    import httpx

    while not stop.is_set():
        started = time.monotonic()
        try:
            status = httpx.get(f"{deployment.base}/healthz", timeout=REQUEST_TIMEOUT + 30).status_code
        except httpx.HTTPError:
            status = 0
        stats.add("healthz", Outcome("ok" if status == 200 else f"healthz_{status}", time.monotonic() - started,
                                     status))
        time.sleep(0.1)


def _listening_workers(deployment) -> int:
    with deployment.owner() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ledger_queue'"
                            " AND datname = current_database()").fetchone()[0]


def test_postgres_stopped_immediately_under_load_then_everything_recovers_without_a_restart(shape):
    # Longer than the pool's RECONNECT_TIMEOUT (5 s): the pool gives its reconnection attempts up and
    # must start them again when requests need connections.
    postgres_outage(shape, outage_seconds=6.0)


def postgres_outage(shape, outage_seconds: float) -> None:
    tenant = shape.tenant("pg-outage")
    setup = shape.client(tenant)
    _, accounts = ops.funded_accounts(setup, 6, 1_000_000)
    echo = ops.publish(setup, tool("echo", ECHO))
    setup.close()
    server_pids, worker_pids = sorted(shape.server_pids()), sorted(w.pid for w in shape.workers)
    wait_until(lambda: _listening_workers(shape) == 2, 15, "both workers to LISTEN")

    stop, stats = threading.Event(), Stats()
    acked = {"transfers": [], "starts": []}
    threads = [threading.Thread(target=_load, args=(shape, tenant, accounts, echo, stop, stats, acked, kind))
               for kind in ("transfer", "transfer", "transfer", "read", "read", "start")]
    threads.append(threading.Thread(target=_poll_healthz, args=(shape, stop, stats)))
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.5)
        down_at = time.monotonic()
        shape.cluster.stop("immediate", wait_for_users=0)
        during_index = len(stats.outcomes)
        time.sleep(outage_seconds)
        shape.cluster.start()
        up_at = time.monotonic()
        after_index = len(stats.outcomes)
        # Recovered: reads and transfers succeed again, without restarting any process.
        recovered = wait_until(lambda: _succeeded_since(stats, after_index), 30,
                               "requests to succeed after the restart")
        recovery_seconds = recovered - up_at
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)

    if os.environ.get("LEDGER_TIMELINE"):  # every request, by when it was sent (0: PostgreSQL stopped)
        for label, o in sorted(stats.outcomes, key=lambda x: x[1].started):
            print(f"{o.started - down_at:7.2f} {o.seconds:6.2f} {label:9} {o.kind} "
                  f"{str(o.body)[:150] if o.kind != 'ok' else ''}")
    outage = stats.outcomes[during_index:after_index]
    outage_kinds = {}
    for label, outcome in outage:
        outage_kinds[f"{label}:{outcome.kind}"] = outage_kinds.get(f"{label}:{outcome.kind}", 0) + 1
    # During the outage: a prompt `retryable` or a 503, never a hang past the deadline, never a 500.
    slowest = max(o.seconds for _, o in stats.outcomes)
    assert slowest <= REQUEST_TIMEOUT + 1.5, f"a request took {slowest:.1f} s"
    assert all(not o.kind.startswith("http_5") and o.kind not in ("transport", "internal_error")
               for _, o in stats.outcomes), stats.by_kind()
    failures = {o.kind for label, o in outage if label != "healthz" and o.kind != "ok"}
    assert failures <= {"retryable"}, outage_kinds
    assert any(label == "healthz" and o.status == 503 for label, o in outage), outage_kinds
    outage_latencies = [o.seconds for label, o in outage if o.kind != "ok"]
    print(f"\nPostgreSQL -m immediate for {outage_seconds:.0f} s under load: {len(stats.outcomes)} requests, outcomes "
          f"{stats.by_kind()}; during the outage {outage_kinds}, error latency p50 "
          f"{percentile(outage_latencies, 50):.2f} s p99 {percentile(outage_latencies, 99):.2f} s; "
          f"recovered {recovery_seconds:.1f} s after the restart")

    # The same processes serve and work: the pools reconnected, the workers listen again.
    assert sorted(shape.server_pids()) == server_pids
    assert sorted(w.pid for w in shape.workers if w.running()) == worker_pids
    wait_until(lambda: _listening_workers(shape) == 2, 20, "both workers to LISTEN again")
    client = shape.client(tenant)
    fresh = [ops.start(client, echo, {"n": i}) for i in range(4)]
    for execution_id in fresh + acked["starts"]:
        assert ops.wait_for_execution(client, execution_id, timeout=60)["status"] == "SUCCEEDED"
    client.close()

    # Every acknowledged write is there; the money adds up.
    assert _transferred(shape, tenant.tenant_id, acked["transfers"]) == set(acked["transfers"])
    with shape.owner() as conn:
        check_money_invariants(conn, tenant.tenant_id)
    assert acked["transfers"] and acked["starts"]


def _succeeded_since(stats: Stats, index: int):
    recent = stats.outcomes[index:]
    kinds = {label for label, o in recent if o.kind == "ok"}
    if {"transfer", "read", "healthz"} <= kinds:
        return time.monotonic()
    return None


# ---------------------------------------------------------------------------- (d) an exhausted pool


SPIN = 'def run(event):\n    for i in range(2000000000):\n        for j in range(2000000000):\n            pass\n'


def test_an_exhausted_pool_queues_a_bounded_number_of_requests_and_fails_the_rest_fast(shape):
    """A server with 2 connections, a queue of 4 and a 2 s wait: 2 slow requests hold both connections;
    of 30 concurrent reads, at most 4 wait (at most the 2 s), the rest fail at once with `retryable`;
    nothing deadlocks, and the server answers as soon as the slow requests are done."""
    import httpx

    from ledger.db.cluster import free_port

    tenant = shape.tenant("pool")
    port = free_port()
    small = Process(["serve", "--no-worker", "--port", str(port), "--log-level", "warning"],
                    shape.env({"LEDGER_POOL_MIN": "1", "LEDGER_POOL_MAX": "2", "LEDGER_POOL_WAIT": "2",
                               "LEDGER_POOL_QUEUE": "4"}),
                    shape.root / "logs" / "small-pool.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ok(httpx, f"{base}/healthz"), 60, f"the small server ({small.log})")
        setup = Client(base, tenant.token)
        account = ops.create_account(setup, "cash")
        spin = ops.publish(setup, tool("spin", SPIN, timeout_ms=6000))
        setup.close()

        slow_results: list[Outcome] = []
        reads: list[Outcome] = []
        lock = threading.Lock()
        go = threading.Barrier(30)

        def slow():
            c = Client(base, tenant.token)
            query, variables = ops.invoke_body(spin, {})
            slow_results.append(timed(lambda: c.post(query, variables)))
            c.close()

        def read(c):
            go.wait()
            outcome = timed(lambda: c.post(ops.ACCOUNT, {"id": account}))
            with lock:
                reads.append(outcome)
            c.close()

        # The readers' clients are made before the slow calls start: each makes an SSL context, and on a
        # loaded machine 30 of them took longer than the slow calls' 6 s, which then ended before a read.
        readers = [threading.Thread(target=read, args=(Client(base, tenant.token),)) for _ in range(30)]
        slow_threads = [threading.Thread(target=slow) for _ in range(2)]
        for thread in slow_threads:
            thread.start()
        # Both connections are held (each slow call's transaction waits, idle, on its sandbox) before the
        # reads start: on a loaded machine a fixed sleep was not always enough.
        with shape.owner() as owner:
            def both_held() -> bool:
                row = owner.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                    " AND state = 'idle in transaction'").fetchone()
                return row[0] >= 2
            wait_until(both_held, 20, "both slow calls holding their connections")
        for thread in readers:
            thread.start()
        for thread in readers + slow_threads:
            thread.join(timeout=60)
        kinds = {}
        for outcome in reads:
            kinds[outcome.kind] = kinds.get(outcome.kind, 0) + 1
        waited = [o for o in reads if o.seconds > 1.0]
        fast = [o.seconds for o in reads if o.seconds <= 1.0]
        print(f"\nexhausted pool (2 connections, queue 4, wait 2 s): 30 reads -> {kinds}; {len(waited)} waited "
              f"(max {max(o.seconds for o in reads):.2f} s), {len(fast)} failed fast "
              f"(p99 {percentile(fast, 99) * 1000:.0f} ms)")
        assert len(reads) == 30
        assert kinds == {"retryable": 30}, kinds
        assert max(o.seconds for o in reads) < 2 + 1.0  # the pool's wait, never more
        assert len(waited) <= 4
        assert all(o.kind == "ok" and o.seconds < 6 + 2 for o in slow_results), slow_results
        # No deadlock: once the slow requests are done, the server answers at once.
        c = Client(base, tenant.token)
        assert timed(lambda: c.post(ops.ACCOUNT, {"id": account})).kind == "ok"
        c.close()
    finally:
        small.stop()


def _ok(httpx, url) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
