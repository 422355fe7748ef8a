"""Deferred statements (ledger/db/pool.py `defer`): a statement whose result nobody reads goes in the round
trip of the connection's next statement, as a bare protocol command (no cursor), and its failure is that
statement's failure."""

from __future__ import annotations

import time

import psycopg
import pytest

from ledger.db.pool import defer, deferred_savepoint, undefer

_TIMEOUT = "SELECT current_setting('statement_timeout') AS timeout"


def _transaction(services, api):
    return services.db.transaction(api.tenant_id, deadline=time.monotonic() + 30)


def test_a_deferred_setting_holds_for_the_next_statement(services, api):
    with _transaction(services, api) as conn:
        defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("1234",))
        assert conn.ledger_deferred
        assert conn.execute(_TIMEOUT).fetchone()["timeout"] == "1234ms"
        assert conn.ledger_deferred == []


def test_a_deferred_statement_is_not_sent_before_the_next_one(services, api):
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        with _transaction(services, api) as conn:
            defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("not a duration",))
            # Nothing was sent yet: the transaction still answers.
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            conn.execute("SELECT 1").fetchone()  # the deferred statement's failure is this one's


def test_deferred_statements_go_in_order_with_several_parameters(services, api):
    with _transaction(services, api) as conn:
        defer(conn, "SELECT set_config(%s, %s, true)", ("ledger.test_a", "one"))
        defer(conn, "SELECT set_config('ledger.test_a', current_setting('ledger.test_a') || %s, true)", ("+two",))
        assert conn.execute("SELECT current_setting('ledger.test_a') AS a").fetchone() == {"a": "one+two"}


def test_an_undeferred_statement_is_never_sent(services, api):
    with _transaction(services, api) as conn:
        before = conn.execute(_TIMEOUT).fetchone()["timeout"]
        deferred = defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("1234",))
        assert undefer(conn, deferred) is True
        assert conn.execute(_TIMEOUT).fetchone()["timeout"] == before
        assert undefer(conn, deferred) is False


def test_deferred_statements_go_before_a_savepoint_begins(services, api):
    with _transaction(services, api) as conn:
        defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("4321",))
        with pytest.raises(RuntimeError):
            with conn.transaction():
                raise RuntimeError("rolled back")
        # The setting was sent before the savepoint, so its rollback did not undo it.
        assert conn.execute(_TIMEOUT).fetchone()["timeout"] == "4321ms"


def test_a_deferred_savepoint_that_ran_a_statement_rolls_back_its_writes(services, api):
    with _transaction(services, api) as conn:
        conn.execute("SELECT set_config('ledger.test_b', 'outer', true)")
        with pytest.raises(RuntimeError):
            with deferred_savepoint(conn):
                conn.execute("SELECT set_config('ledger.test_b', 'inner', true)")
                raise RuntimeError("the call failed")
        assert conn.execute("SELECT current_setting('ledger.test_b') AS b").fetchone() == {"b": "outer"}


def test_a_connection_given_back_forgets_its_deferred_statements(services):
    conn = services.db.pool.getconn()
    defer(conn, "SELECT set_config('statement_timeout', %s, true)", ("1234",))
    services.db.pool.putconn(conn)
    assert conn.ledger_deferred == []


def test_a_deferred_statement_takes_text_parameters_only(services, api):
    with _transaction(services, api) as conn:
        with pytest.raises(TypeError):
            defer(conn, "SELECT set_config('statement_timeout', %s, true)", (1234,))
        with pytest.raises(TypeError):
            defer(conn, "SELECT %s, %s", ("one",))
        assert conn.ledger_deferred == []


def test_a_deferred_statement_refuses_an_escaped_percent_each_time_it_is_deferred(services, api):
    # The text's placeholders are counted once per text (kept), and the refusal must hold on every use.
    with _transaction(services, api) as conn:
        for _ in range(2):
            with pytest.raises(TypeError):
                defer(conn, "SELECT '100%%', %s", ("x",))
        assert conn.ledger_deferred == []
