"""A process's first connection waits while PostgreSQL is briefly down (ledger/db/startup.py), and reports
at once what waiting cannot mend."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from ledger.db.cluster import EmbeddedCluster
from ledger.db.startup import connect_when_up, may_come_up


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="ledger-startup-"))
    os.chmod(root, 0o755)  # the cluster may run as another OS user (when we are root)
    cluster = EmbeddedCluster(root / "pg", durable=False)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop("immediate", wait_for_users=0)
        shutil.rmtree(root, ignore_errors=True)


def test_a_connection_made_while_postgres_is_down_is_made_once_it_is_up(cluster):
    cluster.stop("immediate", wait_for_users=0)
    answers = []

    def connect():
        with connect_when_up(cluster.url(), wait_seconds=30) as conn:
            answers.append((conn.execute("SELECT 1").fetchone(), time.monotonic()))

    # The cluster is started on this thread: a server started by a thread dies with it.
    connecting = threading.Thread(target=connect)
    connecting.start()
    time.sleep(1.5)
    restarted_at = time.monotonic()
    cluster.start()
    connecting.join(timeout=30)
    assert [answer for answer, _ in answers] == [(1,)]
    assert answers[0][1] >= restarted_at


def test_a_database_that_does_not_exist_is_reported_at_once_without_waiting(cluster):
    began = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        connect_when_up(cluster.url("no_such_database"), wait_seconds=30)
    assert time.monotonic() - began < 3


def test_the_wait_ends_with_the_last_connection_error(cluster):
    cluster.stop("immediate", wait_for_users=0)
    try:
        began = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            connect_when_up(cluster.url(), wait_seconds=1.0)
        assert 1.0 <= time.monotonic() - began < 4
    finally:
        cluster.start()


@pytest.mark.parametrize(("message", "waits"), [
    ('connection to server on socket "/run/.s.PGSQL.5432" failed: No such file or directory', True),
    ('connection to server at "127.0.0.1", port 5432 failed: Connection refused', True),
    ('connection to server on socket "/run/.s.PGSQL.5432" failed: FATAL:  the database system is starting up', True),
    ('connection to server on socket "/run/.s.PGSQL.5432" failed: FATAL:  the database system is shutting down', True),
    ('connection to server on socket "/run/.s.PGSQL.5432" failed: FATAL:  role "nobody" does not exist', False),
    ('connection to server at "db", port 5432 failed: FATAL:  password authentication failed for user "ledger"', False),
])
def test_only_a_server_that_is_unreachable_or_not_ready_is_waited_for(message, waits):
    assert may_come_up(psycopg.OperationalError(message)) is waits
