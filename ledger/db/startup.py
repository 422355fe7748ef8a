"""A process's first connection, made while PostgreSQL may be briefly down.

uvicorn's supervisor replaces a server process that died; a replacement that boots during an outage of
the database would otherwise fail its first connection, exit, and be replaced again in a loop of fresh
processes until PostgreSQL is back. It waits instead, as the pool's own open does (`Database.open`).
A failure that waiting cannot mend (a database or role that does not exist, a refused password) is raised
at once, so that a mistyped URL is reported at start, not after the wait.
"""

from __future__ import annotations

import logging
import time

import psycopg

# As long as `Database.open` waits for its first connections.
STARTUP_WAIT_SECONDS = 30.0

log = logging.getLogger("ledger.db")

# libpq's words for a server that is there but not accepting connections yet (or any more). Any other
# FATAL from the server is an answer about the request itself (no such database or role, a password
# refused, a client not allowed), which a retry would only repeat. libpq gives a connection failure no
# SQLSTATE, so its message is all there is to tell them apart.
_SERVER_NOT_READY = ("the database system is starting up", "the database system is shutting down",
                     "the database system is in recovery mode", "the database system is not yet accepting",
                     "the database system is not accepting connections", "sorry, too many clients")


def may_come_up(error: psycopg.OperationalError) -> bool:
    """Whether a failed connection may succeed later: the server could not be reached, or is not ready."""
    text = str(error)
    if "FATAL:" not in text:
        return True  # no server answered: no socket, refused, closed, timed out
    return any(phrase in text for phrase in _SERVER_NOT_READY)


def connect_when_up(conninfo: str, *, wait_seconds: float = STARTUP_WAIT_SECONDS, **kwargs) -> psycopg.Connection:
    """`psycopg.connect`, tried again while PostgreSQL is unreachable or not ready, for up to
    `wait_seconds`; then its last error."""
    give_up_at = time.monotonic() + wait_seconds
    pause = 0.1
    while True:
        try:
            return psycopg.connect(conninfo, connect_timeout=max(1, min(5, int(wait_seconds))), **kwargs)
        except psycopg.OperationalError as error:
            remaining = give_up_at - time.monotonic()
            if not may_come_up(error) or remaining <= 0:
                raise
            log.warning("waiting for PostgreSQL (%.0f s more): %s", remaining, str(error).strip().splitlines()[-1])
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 1.0)
