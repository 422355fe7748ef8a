"""A claim passes the rows of running attempts by their lease as its own snapshot sees it, and calls
`ledger_lease_held` (a fresh snapshot) only for a row whose lease looks lapsed there (migration 0015)."""

from __future__ import annotations

import time

import psycopg
from psycopg.rows import dict_row

from invoke_helpers import publish, tool
from ledger.db.pool import APP_ROLE
from test_queue import start

NOOP = "def run(event):\n    return {}\n"


def _claim(db_url: str, worker: str, lease_seconds: float) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f"SET ROLE {APP_ROLE}")
        return conn.execute("SELECT * FROM ledger_claim_untriggered(%s, 10, %s, '{}')",
                            (worker, lease_seconds)).fetchall()


def _claim_counting_lease_calls(db_url: str, worker: str) -> tuple[list[dict], int]:
    """A claim, and how many times it called ledger_lease_held (its transaction's function statistics)."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        conn.execute("SET LOCAL track_functions = 'all'")
        rows = conn.execute("SELECT * FROM ledger_claim_and_start(%s, 10, 10, '{}')", (worker,)).fetchall()
        calls = conn.execute("SELECT coalesce(sum(calls), 0) AS calls FROM pg_stat_xact_user_functions"
                             " WHERE funcname = 'ledger_lease_held'").fetchone()["calls"]
        conn.rollback()
    return rows, calls


def test_a_claim_passes_a_running_attempts_row_without_calling_the_fresh_lease_test(api, db_url):
    started = start(api, publish(api, tool("noop", NOOP)))
    assert [str(row["execution_id"]) for row in _claim(db_url, "first", 10.0)] == [started["executionId"]]
    rows, calls = _claim_counting_lease_calls(db_url, "second")
    assert rows == []
    assert calls == 0


def test_a_claim_takes_a_row_whose_lease_lapsed_after_testing_it_with_a_fresh_snapshot(api, db_url):
    started = start(api, publish(api, tool("noop", NOOP)))
    assert [str(row["execution_id"]) for row in _claim(db_url, "first", 0.01)] == [started["executionId"]]
    time.sleep(0.05)
    rows, calls = _claim_counting_lease_calls(db_url, "second")
    assert [str(row["execution_id"]) for row in rows] == [started["executionId"]]
    assert calls == 1
