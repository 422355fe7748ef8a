"""An attempt's finish with its COMMIT in the same round trip (ledger/db/pool.py `commit_with`, db/prepared.py
`commit_on_prepared`, migration 0017): once psycopg has prepared the finish on the connection, the deferred
statements, the finish and COMMIT go as one libpq pipeline; until then the cursor runs the finish and the
transaction's end commits. Each test runs on both paths and expects the same rows, errors and end state.
On a pool of one connection, so that every transaction meets the statements the ones before it prepared."""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid

import psycopg
import pytest
from psycopg import pq

from ledger.db import pool, prepared
from ledger.errors import Retryable
from ledger.db.pool import Database, commit_with, defer
from ledger.db.prepared import PreparedRead

from invoke_helpers import publish, tool
from test_queue import ECHO, start, wait_for

_PROBE = "finish_commit_probe"
# A write answering what it wrote; n = 0 fails it (division_by_zero), a repeated `other` fails its COMMIT (a
# deferred unique constraint).
_WRITE = PreparedRead(f"INSERT INTO {_PROBE} (id, n, other) VALUES (%s, %s, %s) RETURNING id, n, 10 / n AS tenth")
# psycopg prepares a statement on its fifth use: by the eighth every transaction's is prepared.
_WARM = 8


@pytest.fixture
def db(services):
    with psycopg.connect(services.db.conninfo, autocommit=True) as owner:
        owner.execute(f"CREATE TABLE IF NOT EXISTS {_PROBE} (id text PRIMARY KEY, n int NOT NULL,"
                      " other text UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        owner.execute(f"GRANT SELECT, INSERT ON {_PROBE} TO ledger_app")
    database = Database.open(services.db.conninfo, min_size=1, max_size=1)
    yield database
    database.close()


@pytest.fixture(params=["prepared", "cursor"])
def path(request, monkeypatch) -> list[str]:
    """The path under test, forced; which way each `commit_with` went is appended to the list."""
    taken: list[str] = []

    def spy(conn, block, statement, params):
        answer = prepared._NOT_PREPARED
        if request.param == "prepared":
            answer = prepared.commit_on_prepared(conn, block, statement, params)
        taken.append("cursor" if answer is prepared._NOT_PREPARED else "prepared")
        return answer

    monkeypatch.setattr(pool, "commit_on_prepared", spy)
    taken.append(request.param)  # the first entry names the path
    return taken


def _warm(db: Database, path: list[str]) -> None:
    for n in range(_WARM):
        with db.transaction(None, deadline=time.monotonic() + 30) as conn:
            commit_with(conn, _WRITE, (f"warm-{uuid.uuid4()}", n + 1, f"warm-{uuid.uuid4()}"))
    assert path[-1] == path[0]


def _kept(db: Database, *ids: str) -> list[str]:
    with psycopg.connect(db.conninfo, autocommit=True) as owner:
        return [r[0] for r in owner.execute(f"SELECT id FROM {_PROBE} WHERE id = ANY(%s) ORDER BY id",
                                            (list(ids),)).fetchall()]


def _failure(exc: BaseException) -> tuple:
    return type(exc).__name__, getattr(exc, "sqlstate", None), str(exc).splitlines()[0]


def _end_state(conn: psycopg.Connection) -> tuple:
    return conn.pgconn.transaction_status, conn._num_transactions, conn.pgconn.pipeline_status, conn._pipeline


_IDLE_END = (pq.TransactionStatus.IDLE, 0, pq.PipelineStatus.OFF, None)


def test_the_last_statement_answers_its_row_and_commits(db, path):
    _warm(db, path)
    with db.transaction(None, deadline=time.monotonic() + 30) as conn:
        row = commit_with(conn, _WRITE, ("kept", 5, "kept"))
        back = conn
    assert path[-1] == path[0]
    assert row == {"id": "kept", "n": 5, "tenth": 2}
    assert _end_state(back) == _IDLE_END
    assert _kept(db, "kept") == ["kept"]


def test_a_failing_last_statement_rolls_back_what_its_transaction_wrote(db, path):
    _warm(db, path)
    with pytest.raises(psycopg.Error) as failed:
        with db.transaction(None, deadline=time.monotonic() + 30) as conn:
            conn.execute(f"INSERT INTO {_PROBE} (id, n) VALUES ('earlier', 1)")
            commit_with(conn, _WRITE, ("failing", 0, "failing"))
    assert path[-1] == path[0]
    assert _failure(failed.value) == ("DivisionByZero", "22012", "division by zero")
    assert _end_state(conn) == _IDLE_END
    assert _kept(db, "earlier", "failing") == []


def test_a_failing_deferred_statement_fails_the_last_statement(db, path):
    _warm(db, path)
    with pytest.raises(psycopg.Error) as failed:
        with db.transaction(None, deadline=time.monotonic() + 30) as conn:
            conn.execute(f"INSERT INTO {_PROBE} (id, n) VALUES ('earlier', 1)")
            defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("not a duration",))
            commit_with(conn, _WRITE, ("after", 1, "after"))
    assert path[-1] == path[0]
    assert _failure(failed.value)[:2] == ("InvalidParameterValue", "22023")
    assert _end_state(conn) == _IDLE_END
    assert _kept(db, "earlier", "after") == []


def test_a_failing_commit_raises_its_error_and_keeps_nothing(db, path):
    _warm(db, path)
    with pytest.raises(psycopg.Error) as failed:
        with db.transaction(None, deadline=time.monotonic() + 30) as conn:
            conn.execute(f"INSERT INTO {_PROBE} (id, n, other) VALUES ('earlier', 1, 'twice')")
            commit_with(conn, _WRITE, ("second", 1, "twice"))
    assert path[-1] == path[0]
    assert _failure(failed.value)[:2] == ("UniqueViolation", "23505")
    assert _end_state(conn) == _IDLE_END
    assert _kept(db, "earlier", "second") == []
    with db.transaction(None, deadline=time.monotonic() + 30) as conn:  # the connection serves the next one
        assert commit_with(conn, _WRITE, ("next", 2, "next")) == {"id": "next", "n": 2, "tenth": 5}
    assert _kept(db, "next") == ["next"]


_FINISH_OR_FAIL = ("SELECT * FROM ledger_finish_attempt_or_fail(%s, %s, %s, 1, '{}', 'null', NULL, '[]', '[]',"
                   " now(), now(), 1, 4, NULL, 'SUCCEEDED', NULL, %s)")


def test_the_finish_or_fail_refuses_a_lost_lease_and_a_pending_cancel_and_writes_nothing(api, services):
    action_id = publish(api, tool("echo", ECHO))
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).isoformat()
    execution_id = uuid.UUID(start(api, action_id, runAt=later)["executionId"])
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(services.db.conninfo, autocommit=True) as owner:
        owner.execute("UPDATE execution_queue SET lease_token = %s WHERE execution_id = %s", (theirs, execution_id))
        states = {}
        for case, cancel in (("lost lease", False), ("cancel pending", True)):
            if cancel:
                owner.execute("UPDATE execution_queue SET lease_token = %s, cancel_requested = true"
                              " WHERE execution_id = %s", (ours, execution_id))
            with pytest.raises(psycopg.Error) as failed:
                with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 30) as conn:
                    conn.execute(_FINISH_OR_FAIL, (api.tenant_id, execution_id, ours, uuid.UUID(action_id)))
            states[case] = failed.value.sqlstate
        invocations = owner.execute("SELECT count(*) FROM invocations WHERE execution_id = %s",
                                    (execution_id,)).fetchone()[0]
        status = owner.execute("SELECT status FROM executions WHERE id = %s", (execution_id,)).fetchone()[0]
    assert states == {"lost lease": "LQ001", "cancel pending": "LQ002"}
    assert (invocations, status) == (0, "QUEUED")


@pytest.fixture
def one_connection_worker(settings, db_url):
    """A queue worker whose attempts share one pooled connection: the finish is prepared by its fifth."""
    from ledger.queue.worker import Worker
    from ledger.wiring import open_services

    services = open_services(dataclasses.replace(settings, pool_min=1, pool_max=1), db_url)
    running = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.1).start()
    yield running
    running.stop()
    services.close()


def test_executions_finish_alike_on_both_paths(api, one_connection_worker, path):
    action_id = publish(api, tool("echo", ECHO))
    ids = [start(api, action_id, {"n": n})["executionId"] for n in range(12)]
    finished = [wait_for(api, execution_id) for execution_id in ids]
    assert path[1:] and set(path[1:]) <= {"prepared", "cursor"}
    if path[0] == "prepared":
        assert "prepared" in path[1:]
    else:
        assert set(path[1:]) == {"cursor"}
    for n, execution in enumerate(finished):
        assert {key: value for key, value in execution.items() if key != "executionId"} == {
            "status": "SUCCEEDED", "attempts": 1, "startedBy": {"executionId": None},
            "invocation": {"attempt": 1, "output": {"echo": {"n": n}}, "error": None},
            "invocations": [{"attempt": 1, "error": None}]}


def test_the_finish_or_fail_writes_what_the_finish_writes(api, services):
    action_id = publish(api, tool("echo", ECHO))
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).isoformat()
    execution_id = uuid.UUID(start(api, action_id, runAt=later)["executionId"])
    ours = uuid.uuid4()
    with psycopg.connect(services.db.conninfo, autocommit=True) as owner:
        owner.execute("UPDATE execution_queue SET lease_token = %s WHERE execution_id = %s", (ours, execution_id))
    finished_at = datetime.datetime.now(datetime.timezone.utc)
    written = {}
    for function, retry_in in (("ledger_finish_attempt", None), ("ledger_finish_attempt_or_fail", None),
                               ("ledger_finish_attempt", 2.5), ("ledger_finish_attempt_or_fail", 2.5)):
        with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 30, rollback=True) as conn:
            answered = conn.execute(
                f"SELECT * FROM {function}(%s, %s, %s, 1, '{{\"n\": 1}}', '{{\"echo\": 1}}', NULL, '[]', '[]',"
                " %s, %s, 1.5, 12, NULL, %s, %s, %s)",
                (api.tenant_id, execution_id, ours, finished_at, finished_at,
                 "QUEUED" if retry_in else "SUCCEEDED", retry_in, uuid.UUID(action_id))).fetchone()
            invocation = conn.execute(
                "SELECT attempt, input, output, error, tools, logs, started_at, finished_at, duration_ms,"
                " output_bytes, usage FROM invocations WHERE execution_id = %s", (execution_id,)).fetchone()
            status = conn.execute("SELECT status FROM executions WHERE id = %s", (execution_id,)).fetchone()
            queue = conn.execute("SELECT lease_token, lease_owner, cancel_requested, run_at > now() AS later"
                                 " FROM execution_queue WHERE execution_id = %s", (execution_id,)).fetchone()
        written[function, retry_in] = (answered, invocation, status, queue)
    assert written["ledger_finish_attempt", None] == written["ledger_finish_attempt_or_fail", None]
    assert written["ledger_finish_attempt", 2.5] == written["ledger_finish_attempt_or_fail", 2.5]
    assert written["ledger_finish_attempt", None][3] is None  # given up for good
    assert written["ledger_finish_attempt", 2.5][3]["lease_token"] is None  # back in the queue


def test_the_finish_or_fail_fails_a_lifecycle_change_to_settle_as_a_lost_race(api, services):
    action_id = publish(api, tool("echo", ECHO))
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).isoformat()
    execution_id = uuid.UUID(start(api, action_id, runAt=later)["executionId"])
    ours = uuid.uuid4()
    with psycopg.connect(services.db.conninfo, autocommit=True) as owner:
        owner.execute("UPDATE execution_queue SET lease_token = %s WHERE execution_id = %s", (ours, execution_id))
        owner.execute("UPDATE actions SET pending = 'DISABLE' WHERE id = %s", (uuid.UUID(action_id),))
        with pytest.raises(Retryable) as failed:
            with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 30) as conn:
                conn.execute(_FINISH_OR_FAIL, (api.tenant_id, execution_id, ours, uuid.UUID(action_id)))
        invocations = owner.execute("SELECT count(*) FROM invocations WHERE execution_id = %s",
                                    (execution_id,)).fetchone()[0]
    assert (failed.value.race, failed.value.__cause__.sqlstate) == (True, "40001")  # run again at once
    assert invocations == 0


def test_without_psycopgs_private_parts_the_last_statement_takes_the_cursor_and_commits(db, monkeypatch):
    monkeypatch.setattr(prepared, "SUPPORTED", False)
    fallback = PreparedRead(_WRITE.sql)
    answers = []

    def spy(conn, block, statement, params):
        answers.append(prepared.commit_on_prepared(conn, block, statement, params))
        return answers[-1]

    monkeypatch.setattr(pool, "commit_on_prepared", spy)
    rows = []
    for n in range(_WARM):
        with db.transaction(None, deadline=time.monotonic() + 30) as conn:
            rows.append(commit_with(conn, fallback, (f"fallback-{n}", 5, f"fallback-{n}")))
    assert answers == [prepared._NOT_PREPARED] * _WARM
    assert rows == [{"id": f"fallback-{n}", "n": 5, "tenth": 2} for n in range(_WARM)]
    assert _kept(db, *(f"fallback-{n}" for n in range(_WARM))) == sorted(f"fallback-{n}" for n in range(_WARM))
