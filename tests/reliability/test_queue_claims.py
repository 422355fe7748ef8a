"""Concurrent claims never claim one execution twice (found by the load test: workers claiming at the same
moment took the same executions, one of each pair then losing its lease or its transaction)."""

from __future__ import annotations

import collections
import threading
import time
import uuid

import psycopg
from psycopg.rows import dict_row

from ledger.queue.claims import claim


def test_concurrent_claims_claim_each_due_execution_once(db_url, api):
    # Queue rows only (no executions behind them): the claim is all this looks at.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no foreign keys for these bare rows
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO execution_queue (tenant_id, execution_id, run_at) VALUES (%s, %s, now())",
                            [(api.tenant_id, uuid.uuid4()) for _ in range(400)])
    claims: collections.Counter = collections.Counter()
    lock, stop = threading.Lock(), threading.Event()

    def claimer(name: str) -> None:
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("SET ROLE ledger_app")
            while not stop.is_set():
                rows = claim(conn, name, 2, 30)
                with lock:
                    claims.update(r["execution_id"] for r in rows)
                if not rows:
                    return

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    assert len(claims) == 400
    assert [e for e, n in claims.items() if n > 1] == []


def test_concurrent_claims_claim_each_lapsed_execution_once(db_url, api):
    """Rows whose lease lapsed (expired an hour ago, explicitly), claimed by workers whose claims keep their
    plans on their connections: a claim whose snapshot still sees a row's lapsed lease after another claim
    replaced it re-tests the new lease with a fresh snapshot (`ledger_lease_held`) and skips the row."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no foreign keys for these bare rows
        rows = [(api.tenant_id, uuid.uuid4(), uuid.uuid4()) for _ in range(300)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at)"
                            " VALUES (%s, %s, %s, now() - interval '1 hour')",
                            [(token, tenant, execution) for tenant, execution, token in rows])
            cur.executemany("INSERT INTO execution_queue (tenant_id, execution_id, run_at, lease_token, lease_owner)"
                            " VALUES (%s, %s, now() - interval '1 hour', %s, 'gone')", rows)
    claims: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def claimer(name: str, untriggered_first: bool) -> None:
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
            conn.execute("SET ROLE ledger_app")
            while True:
                rows = claim(conn, name, 3, 3600, untriggered_first=untriggered_first)
                with lock:
                    claims.update(r["execution_id"] for r in rows)
                if not rows:
                    return

    threads = [threading.Thread(target=claimer, args=(f"w{i}", i % 2 == 0)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(claims) == 300
    assert [e for e, n in claims.items() if n > 1] == []
