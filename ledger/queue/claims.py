"""Claiming started executions, and holding the claim: the lease, the fence, giving the queue row up.

- Claims run as one statement (`ledger_claim_executions`: UPDATE ... FOR UPDATE SKIP LOCKED), in batches.
- Every claim carries a lease the worker renews. A worker that dies stops renewing; its lease lapses
  within `lease_seconds` and another worker claims the execution again.
- The attempt commits only while its lease token still holds the queue row (the fence): an attempt whose
  lease was lost rolls back instead of writing over the retry's outcome.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

# The advisory lock claims take turns on ("claim" in ASCII).
_CLAIM_LOCK = 0x636C61696D


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
    lost: bool = False
    cancel: bool = False
    done: threading.Event = field(default_factory=threading.Event)


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


def fence(conn: psycopg.Connection, job: Job) -> dict:
    """Lock our queue row; raise LeaseLost unless our lease token still holds it."""
    row = conn.execute(
        "SELECT q.lease_token, coalesce(l.cancel_requested, false) AS cancel_requested FROM execution_queue q"
        " LEFT JOIN execution_leases l ON l.lease_token = q.lease_token"
        " WHERE q.tenant_id = %s AND q.execution_id = %s FOR UPDATE OF q",
        (job.tenant_id, job.execution_id)).fetchone()
    if row is None or row["lease_token"] != job.lease_token or job.lost:
        raise LeaseLost()
    return row


def release(conn: psycopg.Connection, job: Job, *, retry_in: float | None) -> None:
    """Give the queue row up: back to the queue after `retry_in` seconds, or gone for good.

    The lease row is dropped after the commit (`drop_lease`): heartbeats update it while the attempt
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


def drop_lease(services: Any, job: Job) -> None:
    with services.db.transaction(job.tenant_id) as conn:
        conn.execute("DELETE FROM execution_leases WHERE lease_token = %s", (job.lease_token,))


def cancel_requested_now(services: Any, job: Job) -> bool:
    """A fresh look at the cancel flag: the attempt's own snapshot predates any cancel made while it ran."""
    with services.db.pool.connection() as conn:
        row = conn.execute("SELECT cancel_requested FROM ledger_renew_leases(%s, %s)",
                           ([job.lease_token], job.lease_seconds)).fetchone()
    return bool(row and row["cancel_requested"])
