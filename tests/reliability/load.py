"""Mixed traffic against a deployment, then the ledger's invariants.

8 connections, each its own keep-alive HTTP connection and thread: 70% account reads, 20% transfer calls
(invokeAction of a transfer tool), 10% starts (startAction of the same tool, run by the workers). Then:
zero-sum per currency; no negative balance where overdraft is off; every balance equal to its transfers;
every SUCCEEDED transfer call has exactly one transfer (a FAILED one none); every queued execution reaches
a final state. Returns throughput, outcomes by code, and latency percentiles.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

from reliability import ops
from reliability.deployment import Deployment, check_money_invariants, percentile, timed, wait_until

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _setup(deployment: Deployment, tenant) -> dict:
    client = deployment.client(tenant)
    try:
        accounts = {}
        for currency, count in (("USD", 6), ("EUR", 4)):
            opening, funded = ops.funded_accounts(client, count, 10_000, currency)
            accounts[currency] = [opening, *funded]
        mover = ops.publish_transfer_tool(client)
        return {"accounts": accounts, "mover": mover}
    finally:
        client.close()


def _traffic(deployment, tenant, setup, stop: threading.Event, results: list, lock: threading.Lock, seed: int):
    rng = random.Random(seed)
    client = deployment.client(tenant, timeout=60)
    all_accounts = [a for accounts in setup["accounts"].values() for a in accounts]
    try:
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.7:
                kind = "read"
                outcome = timed(lambda: client.post(ops.ACCOUNT, {"id": rng.choice(all_accounts)}))
                execution_id = None
            else:
                currency = rng.choice(["USD", "USD", "EUR"])
                source, target = rng.sample(setup["accounts"][currency], 2)
                data = {"id": str(uuid.uuid4()), "source": source, "target": target, "amount": rng.randint(1, 500)}
                if roll < 0.9:
                    kind = "call"
                    query, variables = ops.invoke_body(setup["mover"], data)
                else:
                    kind = "start"
                    query, variables = ops.start_body(setup["mover"], data)
                execution_id = variables["input"]["executionId"]
                outcome = timed(lambda: client.post(query, variables))
                if outcome.kind == "transport":
                    client.close()
                    client = deployment.client(tenant, timeout=60)
            with lock:
                results.append((kind, outcome, execution_id))
    finally:
        client.close()


def run_load(deployment: Deployment, seconds: float, connections: int = 8) -> dict[str, Any]:
    tenant = deployment.tenant(f"load-{uuid.uuid4().hex[:8]}")
    setup = _setup(deployment, tenant)
    stop, lock, results = threading.Event(), threading.Lock(), []
    threads = [threading.Thread(target=_traffic, args=(deployment, tenant, setup, stop, results, lock, i))
               for i in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - started

    # Outcomes: GraphQL errors by code, and what each call and start came to.
    outcomes: Counter = Counter()
    latencies: dict[str, list[float]] = {"read": [], "call": [], "start": []}
    calls_acknowledged, starts_acknowledged = [], []
    for kind, outcome, execution_id in results:
        latencies[kind].append(outcome.seconds)
        if outcome.kind != "ok":
            outcomes[f"{kind} error:{outcome.kind}"] += 1
            continue
        if kind == "call":
            execution = outcome.body["data"]["actions"]["invokeAction"]
            code = (execution["invocation"]["error"] or {}).get("code")
            outcomes[f"call {execution['status']}" + (f":{code}" if code else "")] += 1
            calls_acknowledged.append((execution_id, execution["status"]))
        elif kind == "start":
            outcomes["start QUEUED"] += 1
            starts_acknowledged.append(execution_id)
        else:
            outcomes["read ok"] += 1

    # Every queued execution reaches a final state.
    with deployment.owner() as conn:
        def unfinished() -> list:
            return conn.execute("SELECT id FROM executions WHERE tenant_id = %s AND started AND NOT status = ANY(%s)",
                                (tenant.tenant_id, list(FINAL))).fetchall()
        drained_at = time.monotonic()
        wait_until(lambda: not unfinished(), 180, "every started execution to finish", interval=0.5)
        drain_seconds = time.monotonic() - drained_at
        statuses = dict(conn.execute("SELECT id::text, status FROM executions WHERE tenant_id = %s AND depth = 0",
                                     (tenant.tenant_id,)).fetchall())
        started_outcomes = Counter(statuses[e] for e in starts_acknowledged)
        made = Counter(str(r[0]) for r in conn.execute(
            "SELECT execution_id FROM transfers WHERE tenant_id = %s AND execution_id IS NOT NULL", (tenant.tenant_id,)))
        # Every acknowledged call and start is recorded, as acknowledged.
        assert all(statuses.get(e) == s for e, s in calls_acknowledged), "an acknowledged call is missing or changed"
        assert all(e in statuses for e in starts_acknowledged), "an acknowledged start is missing"
        # Every SUCCEEDED transfer call made exactly one transfer; a FAILED one none.
        wrong = {e: (s, made[e]) for e, s in statuses.items() if made[e] != (1 if s == "SUCCEEDED" else 0)}
        assert wrong == {}, wrong
        money = check_money_invariants(conn, tenant.tenant_id)

    everything = [s for values in latencies.values() for s in values]
    report = {
        "seconds": round(elapsed, 1),
        "connections": connections,
        "requests": len(results),
        "throughput_per_s": round(len(results) / elapsed, 1),
        "mix": {kind: len(values) for kind, values in latencies.items()},
        "outcomes": dict(sorted(outcomes.items())),
        "started_executions": dict(started_outcomes),
        "drain_seconds": round(drain_seconds, 1),
        "latency_ms": {kind: {"p50": round(statistics.median(values) * 1000, 1),
                              "p99": round(percentile(values, 99) * 1000, 1)}
                       for kind, values in (("all", everything), *latencies.items()) if values},
        "money": money,
    }
    # Nothing the server could not answer: no HTTP 5xx, no transport failure, no internal error.
    bad = {k: v for k, v in outcomes.items() if "http_5" in k or "transport" in k or "internal_error" in k}
    assert bad == {}, report
    return report
