"""Claiming started executions, and holding the claim: the lease, the fence, giving the queue row up.

- A claim is one statement (`ledger_claim_and_start`: UPDATE ... FOR UPDATE SKIP LOCKED), in batches, that
  also marks its executions RUNNING (the status change's events are raised in the claim's transaction)
  and drops the leases of the attempts its worker finished since its last claim. Executions of tenants
  without triggers (no event to raise) are claimed by that statement alone, in autocommit, and that commit
  does not wait for the WAL's flush (`ledger_claim_and_start(..., untriggered_only)`, migrations 0014 and
  0018): nothing acknowledged depends on it, and the attempt's synchronous commit flushes it first. The
  claim's statements keep their plans on the connection (PL/pgSQL, migration 0018), so a worker claims on
  a connection of its own (`Worker._connection`).
- Every claim carries a lease the worker renews. A worker that dies stops renewing; its lease lapses
  within `lease_seconds` and another worker claims the execution again.
- The attempt commits only while its lease token still holds the queue row (the fence): an attempt whose
  lease was lost rolls back instead of writing over the retry's outcome.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psycopg

from ..db.prepared import PreparedRead, fetch_all


class LeaseLost(Exception):
    """The attempt no longer holds its claim; its transaction must roll back."""


@dataclass
class Job:
    """One claimed execution as the worker holds it; the heartbeat sets `lost` and `cancel`."""

    tenant_id: uuid.UUID
    execution_id: uuid.UUID
    attempt: int
    lease_token: uuid.UUID
    run_at: datetime.datetime
    lease_seconds: float = 10.0
    # Whether the claim marked it RUNNING with one more attempt (not when a cancel was pending).
    started: bool = True
    lost: bool = False
    cancel: bool = False
    done: threading.Event = field(default_factory=threading.Event)


# The claim a worker makes most, on psycopg's prepared statement without a cursor once psycopg has
# prepared it (db/prepared.py): the cursor's Python was a large part of the claim's client CPU.
_CLAIM_UNTRIGGERED = PreparedRead("SELECT * FROM ledger_claim_and_start(%s, %s, %s, %s, true)")


def uuid_array(ids: Sequence[uuid.UUID]) -> str:
    """UUIDs (leases, executions) as a uuid[] literal, which the server reads as the uuid[] parameter it
    stands for (psycopg sends a str untyped): psycopg's list dumper runs a regular expression over every
    element's text to decide its quoting (~14k instructions a UUID); a UUID's text needs none."""
    if not all(type(id_) is uuid.UUID for id_ in ids):
        raise TypeError(f"a uuid[] literal is made of UUIDs only: {ids!r}")
    return "{" + ",".join(map(str, ids)) + "}"


def claim(conn: psycopg.Connection, worker: str, batch: int, lease_seconds: float, *,
          finished: Sequence[uuid.UUID] = (), on_started: Callable[[psycopg.Connection, list[dict]], None] | None = None,
          untriggered_first: bool = False) -> list[dict]:
    """Claim up to `batch` due executions for `worker` and mark them RUNNING, on an autocommit connection;
    `finished`: the leases of attempts the worker finished, dropped with it.

    READ COMMITTED, so that a claim skips (never fails on) rows a concurrent claim took, and needs no lock
    of its own: see `ledger_lease_held`. `on_started(conn, rows)` runs before the commit, to raise the
    events of the status changes in the transaction that makes them.

    `untriggered_first`: first claim, in one statement that is its own transaction, executions of tenants
    with no trigger on their status changes (no trigger can react to their RUNNING); only a batch that does
    not fill goes on to the claim in a transaction of its own, for the rest. The rows that one claimed say
    `in_transaction`.
    """
    rows: list[dict] = []
    if untriggered_first:
        # Its commit does not wait for its flush (migrations 0014, 0018): the attempt's own commit does.
        rows = fetch_all(conn, _CLAIM_UNTRIGGERED, (worker, batch, lease_seconds, uuid_array(finished)))
        if len(rows) >= batch:
            return rows
        try:
            # The leases of `finished` were dropped with it.
            return rows + _claim_in_transaction(conn, worker, batch - len(rows), lease_seconds, (), on_started)
        except Exception:
            if rows:
                return rows  # committed: run them; the rest waits for the next claim
            raise
    return _claim_in_transaction(conn, worker, batch, lease_seconds, finished, on_started)


def _claim_in_transaction(conn: psycopg.Connection, worker: str, batch: int, lease_seconds: float,
                          finished: Sequence[uuid.UUID],
                          on_started: Callable[[psycopg.Connection, list[dict]], None] | None) -> list[dict]:
    with conn.pipeline():  # BEGIN and the claim in one round trip
        conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        cursor = conn.execute("SELECT * FROM ledger_claim_and_start(%s, %s, %s, %s)",
                              (worker, batch, lease_seconds, uuid_array(finished)))
    try:
        rows = cursor.fetchall()
        for row in rows:
            row["in_transaction"] = True
        if on_started is not None and rows:
            on_started(conn, rows)
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed:
            conn.execute("ROLLBACK")
        raise
    return rows


# The queue row as an attempt sees it; the fence locks it.
QUEUE_ROW = "SELECT lease_token, cancel_requested FROM execution_queue WHERE tenant_id = %s AND execution_id = %s"


def held(row: dict | None, job: Job) -> dict:
    """Raise LeaseLost unless our lease token still holds the queue row (as read or locked)."""
    if row is None or row["lease_token"] != job.lease_token or job.lost:
        raise LeaseLost()
    return row


def fence(conn: psycopg.Connection, job: Job) -> dict:
    """Lock our queue row; raise LeaseLost unless our lease token still holds it.

    Under REPEATABLE READ the lock fails as a lost race when the row changed after the attempt's snapshot:
    another worker claimed it (its lease lapsed), or a cancel was requested meanwhile."""
    return held(conn.execute(QUEUE_ROW + " FOR UPDATE", (job.tenant_id, job.execution_id)).fetchone(), job)


def release(conn: psycopg.Connection, job: Job, *, retry_in: float | None) -> None:
    """Give the queue row up: back to the queue after `retry_in` seconds, or gone for good.

    The lease row is dropped by the worker's next claim (`claim(finished=...)`): heartbeats update it
    while the attempt runs, so touching it inside the attempt's snapshot would be a serialization conflict.
    """
    if retry_in is None:
        conn.execute("DELETE FROM execution_queue WHERE tenant_id = %s AND execution_id = %s",
                     (job.tenant_id, job.execution_id))
    else:
        conn.execute(
            "UPDATE execution_queue SET run_at = now() + make_interval(secs => %s), lease_token = NULL,"
            " lease_owner = NULL, cancel_requested = false WHERE tenant_id = %s AND execution_id = %s",
            (retry_in, job.tenant_id, job.execution_id),
        )


def drop_leases(conn: psycopg.Connection, tokens: Sequence[uuid.UUID]) -> None:
    """Drop finished attempts' leases outside a claim (a worker stopping); an autocommit connection."""
    conn.execute("SELECT ledger_claim_and_start('', 0, 0, %s)", (uuid_array(tokens),))
