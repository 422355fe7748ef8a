"""A request's opening without psycopg's pipeline (ledger/db/prepared.py `begin_on_prepared`): once psycopg
has prepared every statement of the opening on the connection, BEGIN and the statements go as one libpq
pipeline, answering the rows, errors and transaction psycopg's pipeline gives; until then, psycopg's
pipeline. On a pool of one connection, so that every opening meets the statements the ones before it
prepared."""

from __future__ import annotations

import contextlib
import json
import time

import psycopg
import pytest
from psycopg import pq

from ledger.auth.clients import opening_query
from ledger.db import pool, prepared
from ledger.db.pool import Database, deferred_savepoint

_SEEN = ("SELECT current_setting('ledger.tenant_id') AS tenant, current_setting('transaction_isolation') AS isolation,"
         " current_setting('statement_timeout') AS timeout")
_TYPED = "SELECT %s::int + 1 AS n, %s AS t, %s::jsonb AS doc"
_NUMBER = "SELECT %s::int AS n"
# psycopg prepares a statement on its fifth use: by the eighth opening every statement is prepared.
_WARM = 8


@pytest.fixture
def db(services):
    database = Database.open(services.db.conninfo, min_size=1, max_size=1)
    yield database
    database.close()


@pytest.fixture
def paths(monkeypatch) -> list[str]:
    """Which way each opening went: 'prepared' (one libpq pipeline) or 'pipeline' (psycopg's)."""
    taken: list[str] = []

    def spy(conn, block, statements):
        try:
            return prepared.begin_on_prepared(conn, block, statements)
        finally:
            taken.append("pipeline" if block.status == block.Status.NOT_STARTED else "prepared")

    monkeypatch.setattr(pool, "begin_on_prepared", spy)
    return taken


def _as_json(value) -> str:
    """A value's JSON with each scalar's type: equal texts mean equal rows, types and key order."""
    return json.dumps(value, default=lambda v: f"{type(v).__name__}:{v}")


def _open(db: Database, tenant, *, rollback: bool = False, undo: bool = False, **statements) -> dict:
    """What one opening shows: its rows, its transaction's settings and state, psycopg's bookkeeping of
    it, a savepoint inside it, and whether it committed. `undo`: two more savepoints, rolled back (psycopg
    then forgets its prepared statements)."""
    with db.transaction(tenant, deadline=time.monotonic() + 30, rollback=rollback, **statements) as conn:
        settings = conn.execute(_SEEN).fetchone()
        xid = conn.execute("SELECT txid_current()::text AS xid").fetchone()["xid"]
        seen = {"rows": _as_json(conn.ledger_first), "tenant": settings["tenant"],
                "isolation": settings["isolation"], "timeout": settings["timeout"],
                "status": conn.pgconn.transaction_status, "psycopg_pipeline": conn._pipeline,
                "libpq_pipeline": conn.pgconn.pipeline_status, "nesting": conn._num_transactions}
        with conn.transaction():
            seen["nested"] = conn._num_transactions
            conn.execute("SELECT set_config('ledger.probe', 'kept', true)")
        if undo:
            with contextlib.suppress(ZeroDivisionError), conn.transaction():
                conn.execute("SELECT set_config('ledger.probe', 'undone', true)")
                raise ZeroDivisionError
            with contextlib.suppress(ZeroDivisionError), deferred_savepoint(conn):
                conn.execute("SELECT set_config('ledger.probe', 'undone too', true)")
                raise ZeroDivisionError
        seen["probe"] = conn.execute("SELECT current_setting('ledger.probe') AS probe").fetchone()["probe"]
        back = conn
    seen["after"] = (back.pgconn.transaction_status, back._num_transactions, back.pgconn.pipeline_status)
    with psycopg.connect(db.conninfo, autocommit=True) as owner:
        seen["outcome"] = owner.execute("SELECT txid_status(%s::bigint)", (xid,)).fetchone()[0]
    return seen


def _without_timeout(seen: dict) -> dict:
    """The opening less its statement_timeout, the deadline's milliseconds left when it opened."""
    assert 29_000 <= int(seen["timeout"].removesuffix("ms")) <= 30_000
    return {key: value for key, value in seen.items() if key != "timeout"}


def _same_openings(openings: list[dict]) -> None:
    first, *rest = [_without_timeout(seen) for seen in openings]
    assert first["status"] == pq.TransactionStatus.INTRANS and first["nesting"] == 1 and first["nested"] == 2
    assert first["psycopg_pipeline"] is None and first["libpq_pipeline"] == pq.PipelineStatus.OFF
    assert first["probe"] == "kept" and first["after"] == (pq.TransactionStatus.IDLE, 0, pq.PipelineStatus.OFF)
    for seen in rest:
        assert seen == first


def test_an_opening_with_an_opener_on_prepared_statements_answers_what_psycopgs_pipeline_answers(db, api, paths):
    first = [(_SEEN, None), (_TYPED, (41, "text", '{"b": [1, 2.5], "a": null}'))]
    openings = [_open(db, api.tenant_id, opener=opening_query(api.client_id), first=first) for _ in range(_WARM)]
    assert paths[0] == "pipeline" and paths[-1] == "prepared"
    _same_openings(openings)
    client, _settings, typed = json.loads(openings[-1]["rows"])
    assert client["enabled"] is True and typed == {"n": 42, "t": "text", "doc": {"a": None, "b": [1, 2.5]}}
    assert openings[-1]["tenant"] == str(api.tenant_id) and openings[-1]["outcome"] == "committed"


def test_an_opening_without_an_opener_on_prepared_statements_answers_what_psycopgs_pipeline_answers(db, api, paths):
    openings = [_open(db, api.tenant_id, first=[(_SEEN, None)]) for _ in range(_WARM)]
    assert paths[0] == "pipeline" and paths[-1] == "prepared"
    _same_openings(openings)
    assert openings[-1]["tenant"] == str(api.tenant_id) and openings[-1]["isolation"] == "repeatable read"


def test_an_opening_of_a_missing_client_answers_none_on_either_way(db, api, other_api, paths):
    openings = [_open(db, api.tenant_id, opener=opening_query(other_api.client_id)) for _ in range(_WARM)]
    assert paths[0] == "pipeline" and paths[-1] == "prepared"
    _same_openings(openings)
    assert openings[-1]["rows"] == "[null]"


def test_a_rolled_back_opening_on_prepared_statements_rolls_back_as_psycopgs_pipeline_does(db, api, paths):
    for _ in range(_WARM):
        _open(db, api.tenant_id, first=[(_SEEN, None)])
    # The first rollback opens on prepared statements; psycopg forgets them when it rolls back, so the
    # second opens in its pipeline.
    openings = [_open(db, api.tenant_id, first=[(_SEEN, None)], rollback=True) for _ in range(2)]
    assert paths[-2:] == ["prepared", "pipeline"]
    _same_openings(openings)
    assert openings[0]["outcome"] == "aborted"


def test_savepoints_rolled_back_inside_an_opening_on_prepared_statements_undo_what_they_undo_in_psycopgs(db, api,
                                                                                                      paths):
    for _ in range(_WARM):
        _open(db, api.tenant_id, opener=opening_query(api.client_id))
    openings = [_open(db, api.tenant_id, opener=opening_query(api.client_id), undo=True) for _ in range(2)]
    assert paths[-2:] == ["prepared", "pipeline"]
    _same_openings(openings)
    assert openings[0]["outcome"] == "committed"


def _failure(db: Database, tenant, first) -> tuple:
    """What a failing opening raises, and the state of the connection it gives back."""
    with pytest.raises(psycopg.Error) as raised:
        with db.transaction(tenant, deadline=time.monotonic() + 30, first=first):
            pass
    with db.transaction(tenant, deadline=time.monotonic() + 30) as conn:
        state = (conn._num_transactions, conn._pipeline, conn.pgconn.pipeline_status)
    error = raised.value
    return type(error), error.sqlstate, str(error), error.diag.message_primary, state


def test_a_failing_opening_on_prepared_statements_raises_what_psycopgs_pipeline_raises(db, api, paths):
    failing = [(_SEEN, None), (_NUMBER, ("not a number",)), (_SEEN, None)]
    in_pipeline = _failure(db, api.tenant_id, failing)
    for _ in range(_WARM):  # psycopg forgot its prepared statements in the failure's rollback
        with db.transaction(api.tenant_id, first=[(_SEEN, None), (_NUMBER, ("1",)), (_SEEN, None)]):
            pass
    start = len(paths)
    on_prepared = _failure(db, api.tenant_id, failing)
    assert paths[0] == "pipeline" and paths[start] == "prepared"
    assert on_prepared == in_pipeline
    assert in_pipeline[0] is psycopg.errors.InvalidTextRepresentation
    assert in_pipeline[4] == (1, None, pq.PipelineStatus.OFF)


def test_an_opening_on_a_broken_trusted_connection_is_retried_on_a_checked_one(db, api, paths):
    for _ in range(_WARM):
        _open(db, api.tenant_id, opener=opening_query(api.client_id))
    assert paths[-1] == "prepared"
    with psycopg.connect(db.conninfo, autocommit=True) as owner:
        closed = owner.execute("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                               " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                               " AND state = 'idle') AS closed").fetchone()[0]
    assert closed >= 1
    start = len(paths)
    seen = _open(db, api.tenant_id, opener=opening_query(api.client_id))
    assert paths[start:] == ["prepared", "pipeline"]  # the broken one on prepared statements, then a new one
    assert json.loads(seen["rows"])[0] is not None and seen["outcome"] == "committed"


def test_an_opening_with_a_statement_of_named_parameters_stays_in_psycopgs_pipeline(db, api, paths):
    first = [(_SEEN, None), ("SELECT %(n)s::int AS n", {"n": 7})]
    openings = [_open(db, api.tenant_id, first=first) for _ in range(_WARM)]
    assert paths == ["pipeline"] * _WARM
    _same_openings(openings)
    assert json.loads(openings[-1]["rows"])[1] == {"n": 7}


def test_openings_on_prepared_statements_share_the_connections_transformer_and_keep_no_result(db, api, paths):
    first = [(_SEEN, None), (_TYPED, (41, "text", '{"a": 1}'))]
    kept = []
    for _ in range(_WARM + 2):
        with db.transaction(api.tenant_id, deadline=time.monotonic() + 30, opener=opening_query(api.client_id),
                            first=first) as conn:
            kept.append(getattr(conn, "ledger_transformer", (None,))[0])
    assert paths[-3:] == ["prepared"] * 3
    assert kept[-1] is not None and kept[-1] is kept[-2] is kept[-3] and kept[-1].pgresult is None
