"""A hot read on its prepared statement without a cursor (ledger/db/prepared.py): the row, the error and
the transaction's behaviour the cursor gives, on the pool's own connections."""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers import ACCOUNT, funded_account, transfer
from ledger.db import prepared as prepared_module
from ledger.db.pool import defer
from ledger.db.prepared import PreparedRead, fetch_one
from ledger.errors import Retryable

_READ = PreparedRead("SELECT tenant_id, id, name, currency, balance, allow_overdraft, execution_id, created_at"
                     " FROM accounts WHERE tenant_id = %s AND id = %s")


def _tenant_of(db_url: str, account: str) -> uuid.UUID:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT tenant_id FROM accounts WHERE id = %s", (account,)).fetchone()[0]


@pytest.fixture
def account(api, db_url):
    _, funded = funded_account(api, 10)
    return _tenant_of(db_url, funded), uuid.UUID(funded)


def test_a_prepared_read_answers_the_row_the_cursor_answers(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        for _ in range(8):  # through the cursor until psycopg prepares the statement, then without one
            assert fetch_one(conn, _READ, (tenant, account_id)) == conn.execute(_READ.sql, (tenant, account_id)).fetchone()
        row = fetch_one(conn, _READ, (tenant, account_id))
    assert row["balance"] == 10 and row["id"] == account_id and row["currency"] == "USD"
    assert list(row) == ["tenant_id", "id", "name", "currency", "balance", "allow_overdraft", "execution_id",
                         "created_at"]


def test_a_prepared_read_of_a_missing_row_answers_none(services, account):
    tenant, _ = account
    with services.db.transaction(tenant) as conn:
        assert fetch_one(conn, _READ, (tenant, uuid.uuid4())) is None


def test_a_prepared_read_sees_the_row_level_security_of_its_transaction(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        assert fetch_one(conn, _READ, (tenant, account_id)) is not None
    with services.db.transaction(uuid.uuid4()) as conn:  # another tenant: the same prepared statement, no row
        assert fetch_one(conn, _READ, (tenant, account_id)) is None


def test_a_prepared_read_with_parameters_of_other_types_answers_the_same(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        assert fetch_one(conn, _READ, (str(tenant), str(account_id))) == fetch_one(conn, _READ, (tenant, account_id))


def test_a_failed_prepared_read_raises_what_the_cursor_raises(services, account):
    tenant, _ = account
    errors = []
    for read in (lambda conn: fetch_one(conn, _READ, (tenant, "not a uuid")),
                 lambda conn: conn.execute(_READ.sql, (tenant, "not a uuid")).fetchone()):
        with pytest.raises(psycopg.Error) as raised:
            with services.db.transaction(tenant) as conn:
                read(conn)
        errors.append(raised.value)
    assert [type(e) for e in errors] == [psycopg.errors.InvalidTextRepresentation] * 2
    assert str(errors[0]) == str(errors[1]) and errors[0].sqlstate == errors[1].sqlstate


def _failures_both_ways(services, tenant, account_id, before_last) -> list[psycopg.Error]:
    """What the read raises, on this path and through the cursor, when `before_last(conn)` runs between
    eight reads (by then psycopg has prepared it) and a last one."""
    errors = []
    for read in (lambda conn: fetch_one(conn, _READ, (tenant, account_id)),
                 lambda conn: conn.execute(_READ.sql, (tenant, account_id)).fetchone()):
        with pytest.raises(psycopg.Error) as raised:
            with services.db.transaction(tenant) as conn:
                for _ in range(8):
                    read(conn)
                before_last(conn)
                read(conn)
        errors.append(raised.value)
    return errors


def test_a_prepared_read_in_a_failed_transaction_raises_what_the_cursor_raises(services, account):
    def fail(conn):
        with contextlib.suppress(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")

    errors = _failures_both_ways(services, *account, fail)
    assert type(errors[0]) is type(errors[1]) is psycopg.errors.InFailedSqlTransaction
    assert str(errors[0]) == str(errors[1])


def _counting_cursor_uses(conn) -> list:
    """The statements `conn` runs through a cursor from now on."""
    uses = []
    execute = conn.execute
    conn.execute = lambda sql, params=None, **kw: uses.append(sql) or execute(sql, params, **kw)
    return uses


def test_a_read_runs_without_a_cursor_once_psycopg_has_prepared_it(db_url, account):
    tenant, account_id = account
    read = PreparedRead("SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s")
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        uses = _counting_cursor_uses(conn)
        with conn.transaction():
            for _ in range(10):
                assert fetch_one(conn, read, (tenant, account_id)) == {"balance": 10}
        # psycopg prepares a statement at its sixth use; from the seventh this path runs it itself
        assert len(uses) == 6


def test_a_read_after_a_rollback_made_psycopg_drop_its_statements_still_answers(db_url, account):
    tenant, account_id = account
    read = PreparedRead("SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s")
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        for _ in range(8):
            assert fetch_one(conn, read, (tenant, account_id)) == {"balance": 10}
        with pytest.raises(RuntimeError):
            with conn.transaction():  # psycopg answers its ROLLBACK with DEALLOCATE ALL
                assert fetch_one(conn, read, (tenant, account_id)) == {"balance": 10}
                raise RuntimeError("roll back")
        uses = _counting_cursor_uses(conn)
        for _ in range(8):
            assert fetch_one(conn, read, (tenant, account_id)) == {"balance": 10}
        assert len(uses) == 6  # prepared again by psycopg, then run here again


def test_a_prepared_read_sends_the_deferred_statements_first(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        defer(conn, "SELECT set_config('ledger.probe', 'sent', true)")
        assert fetch_one(conn, _READ, (tenant, account_id)) is not None
        assert not conn.ledger_deferred
        assert conn.execute("SELECT current_setting('ledger.probe') AS v").fetchone() == {"v": "sent"}


def test_a_prepared_read_past_its_transactions_deadline_is_refused(services, account):
    tenant, account_id = account
    with pytest.raises(Retryable):
        with services.db.transaction(tenant, deadline=time.monotonic() + 0.5) as conn:
            time.sleep(0.6)
            fetch_one(conn, _READ, (tenant, account_id))


def test_a_prepared_read_takes_only_positional_placeholders():
    with pytest.raises(ValueError):
        PreparedRead("SELECT 1 WHERE id = %(id)s")


def test_an_account_read_through_the_api_after_its_statement_was_prepared_answers_the_new_balance(api):
    opening, funded = funded_account(api, 10)
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 10
    transfer(api, opening, funded, 5)
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 15


def test_this_psycopg_has_the_private_parts_the_prepared_path_reads():
    # A psycopg release that moved them would send every read through the cursor (still correct, slower):
    # this says so, rather than the bench.
    from ledger.db import prepared

    assert prepared.SUPPORTED, f"psycopg {psycopg.__version__}: ledger/db/prepared.py takes the cursor only"


def test_without_those_parts_a_prepared_read_takes_the_cursor_and_answers_the_same(services, account, monkeypatch):
    from ledger.db import prepared

    monkeypatch.setattr(prepared, "SUPPORTED", False)
    fallback = PreparedRead(_READ.sql)
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        for _ in range(8):
            assert fetch_one(conn, fallback, (tenant, account_id)) == conn.execute(_READ.sql, (tenant, account_id)).fetchone()


def _transfer_params(tenant, transfer_id, source, target, amount):
    return (tenant, transfer_id, source, target, amount, "USD", None, None, source, amount, amount, tenant,
            source, target)


def test_a_transfer_on_its_prepared_statement_answers_the_rows_the_cursor_answers(services, api, db_url):
    from ledger.domain.accounts import _LOCK_ACCOUNTS, _TRANSFER
    from ledger.db.prepared import fetch_all

    opening, funded = funded_account(api, 100)
    tenant, source, target = _tenant_of(db_url, funded), uuid.UUID(funded), uuid.UUID(opening)
    with services.db.transaction(tenant) as conn:
        uses = _counting_cursor_uses(conn)
        for i in range(1, 9):  # through the cursor until psycopg prepares the statements, then without one
            locked = fetch_all(conn, _LOCK_ACCOUNTS, (tenant, source, target))
            moved = fetch_all(conn, _TRANSFER, _transfer_params(tenant, uuid.uuid4(), source, target, 1))
            assert [row["id"] for row in locked] == sorted([source, target])
            assert {row["id"]: row["balance"] for row in moved}[source] == 100 - i
        settled = len(uses)  # at most six uses of each through the cursor (fewer if this connection ran them)
        assert fetch_all(conn, _LOCK_ACCOUNTS, (tenant, source, target))
        assert len(uses) == settled  # prepared by psycopg now: run without a cursor
        by_cursor = conn.execute(_TRANSFER.sql, _transfer_params(tenant, uuid.uuid4(), source, target, 1)).fetchall()
        by_path = fetch_all(conn, _TRANSFER, _transfer_params(tenant, uuid.uuid4(), source, target, 1))
        assert [list(row) for row in by_path] == [list(row) for row in by_cursor]
        assert [[type(value) for value in row.values()] for row in by_path] == [
            [type(value) for value in row.values()] for row in by_cursor]
        assert len(uses) == settled + 1
        assert {row["id"]: row["balance"] for row in by_path}[source] == 90
        taken = by_path[0]["t_id"]
        # A transfer id already taken inserts nothing and changes no balance: no rows, as the cursor answers.
        assert fetch_all(conn, _TRANSFER, _transfer_params(tenant, taken, source, target, 1)) == []
        assert fetch_all(conn, _LOCK_ACCOUNTS, (tenant, uuid.uuid4(), uuid.uuid4())) == []


def test_a_failed_write_on_its_prepared_statement_raises_what_the_cursor_raises(services, api, db_url):
    from ledger.domain.accounts import _TRANSFER
    from ledger.db.prepared import fetch_all

    opening, funded = funded_account(api, 100)
    tenant, source, target = _tenant_of(db_url, funded), uuid.UUID(funded), uuid.UUID(opening)
    errors = []
    for write in (lambda conn, params: fetch_all(conn, _TRANSFER, params),
                  lambda conn, params: conn.execute(_TRANSFER.sql, params).fetchall()):
        with pytest.raises(psycopg.Error) as raised:
            with services.db.transaction(tenant) as conn:
                for _ in range(8):  # prepared by now: the write below is this path's, or the cursor's
                    write(conn, _transfer_params(tenant, uuid.uuid4(), source, target, 1))
                # The balance's CHECK (no overdraft) refuses what the domain's own check would have stopped,
                # with a deferred statement before it in its round trip.
                defer(conn, "SELECT set_config('ledger.probe', 'sent', true)")
                write(conn, _transfer_params(tenant, uuid.uuid4(), source, target, 1000))
        errors.append(raised.value)
    assert type(errors[0]) is type(errors[1])
    assert str(errors[0]) == str(errors[1]) and errors[0].sqlstate == errors[1].sqlstate


def test_a_prepared_read_sends_the_deferred_statements_in_its_round_trip_without_a_cursor(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        for _ in range(8):
            expected = fetch_one(conn, _READ, (tenant, account_id))
        uses = _counting_cursor_uses(conn)
        defer(conn, "SELECT set_config('ledger.probe', %s, true)", ["first"])
        defer(conn, "SELECT set_config('ledger.probe', %s || '+second', true)", ["first"])
        assert fetch_one(conn, _READ, (tenant, account_id)) == expected
        assert uses == [] and not conn.ledger_deferred and conn.pgconn.pipeline_status == 0
        assert fetch_one(conn, PreparedRead("SELECT current_setting('ledger.probe') AS v"), ()) == {"v": "first+second"}


def test_a_failed_deferred_statement_fails_the_read_as_the_cursor_fails_it(services, account):
    def defer_a_failure(conn):
        defer(conn, "SELECT set_config('statement_timeout', %s, true)", ["not a duration"])

    errors = _failures_both_ways(services, *account, defer_a_failure)
    assert type(errors[0]) is type(errors[1]) is psycopg.errors.InvalidParameterValue
    assert str(errors[0]) == str(errors[1])


def test_after_a_failed_deferred_statement_the_connection_is_out_of_the_pipeline_and_the_transaction_failed(
        services, account):
    tenant, account_id = account
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        with services.db.transaction(tenant) as conn:
            for _ in range(8):
                fetch_one(conn, _READ, (tenant, account_id))
            defer(conn, "SELECT set_config('statement_timeout', %s, true)", ["not a duration"])
            try:
                fetch_one(conn, _READ, (tenant, account_id))
            finally:
                assert not conn.ledger_deferred and conn.pgconn.pipeline_status == 0
                assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR


def _scope(conn):
    from ledger.scope import Scope

    return Scope(conn=conn, principal=None, chain=None, services=None, deadline=0.0)


def test_a_scopes_statement_runs_without_a_cursor_once_psycopg_has_prepared_it(services, account):
    tenant, account_id = account
    sql = "SELECT id, balance FROM accounts WHERE tenant_id = %s AND id = %s"
    with services.db.transaction(tenant) as conn:
        scope = _scope(conn)
        expected = conn.execute(sql, (tenant, account_id)).fetchone()
        for _ in range(8):
            assert scope.one(sql, (tenant, account_id)) == expected
            assert scope.all(sql, (tenant, account_id)) == [expected]
        uses = _counting_cursor_uses(conn)
        assert scope.one(sql, (tenant, account_id)) == expected
        assert scope.all(sql, (tenant, uuid.uuid4())) == [] and scope.one(sql, (tenant, uuid.uuid4())) is None
        assert uses == []


def test_a_scopes_statement_that_answers_no_rows_raises_what_the_cursor_raises(services, account):
    tenant, account_id = account
    sql = "UPDATE accounts SET name = name WHERE tenant_id = %s AND id = %s"
    with services.db.transaction(tenant) as conn:
        scope = _scope(conn)
        errors = []
        for _ in range(9):  # the cursor's until psycopg prepares it, then this path's
            with pytest.raises(psycopg.ProgrammingError) as raised:
                scope.one(sql, (tenant, account_id))
            errors.append(str(raised.value))
        assert set(errors) == {"the last operation didn't produce records (command status: UPDATE 1)"}


def test_a_scopes_statement_with_other_parameters_or_rows_takes_the_cursor(services, db_url, account):
    tenant, account_id = account
    sql = "SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s"
    with services.db.transaction(tenant) as conn:
        scope = _scope(conn)
        for _ in range(8):
            scope.one(sql, (tenant, account_id))
        uses = _counting_cursor_uses(conn)
        assert scope.one(sql, [tenant, account_id]) == {"balance": 10}  # a list: the cursor's
        assert scope.one("SELECT balance FROM accounts WHERE tenant_id = %(t)s AND id = %(a)s",
                         {"t": tenant, "a": account_id}) == {"balance": 10}
        assert len(uses) == 2
    with psycopg.connect(db_url) as conn:  # tuples, not dicts: the cursor's rows
        conn.execute("SELECT set_config('ledger.tenant_id', %s, false)", (str(tenant),))
        scope = _scope(conn)
        for _ in range(8):
            assert scope.one(sql, (tenant, account_id)) == (10,)


def _prepared(conn, tenant, account_id) -> None:
    for _ in range(8):  # through the cursor until psycopg prepares the statement
        fetch_one(conn, _READ, (tenant, account_id))


def test_a_connections_prepared_reads_share_one_transformer_and_keep_no_result(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        _prepared(conn, tenant, account_id)
        kept = conn.ledger_transformer[0]
        for _ in range(3):
            assert fetch_one(conn, _READ, (tenant, account_id)) == conn.execute(_READ.sql, (tenant, account_id)).fetchone()
            assert conn.ledger_transformer[0] is kept
        assert kept.pgresult is None  # the rows were loaded: the result goes with the read


def test_a_prepared_read_after_the_time_zone_changed_answers_the_cursors_times(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        _prepared(conn, tenant, account_id)
        utc = fetch_one(conn, _READ, (tenant, account_id))["created_at"]
        conn.execute("SET LOCAL TimeZone = 'Asia/Tokyo'")  # the kept Transformer's loaders read the old zone
        row = fetch_one(conn, _READ, (tenant, account_id))
        assert row == conn.execute(_READ.sql, (tenant, account_id)).fetchone()
        assert row["created_at"] == utc and row["created_at"].utcoffset() == datetime.timedelta(hours=9)
        assert str(row["created_at"].tzinfo) == "Asia/Tokyo"


def test_a_prepared_read_after_the_date_style_changed_answers_the_cursors_dates(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        _prepared(conn, tenant, account_id)
        before = fetch_one(conn, _READ, (tenant, account_id))["created_at"]
        conn.execute("SET LOCAL DateStyle = 'German, DMY'")
        raised = []
        for read in (lambda: fetch_one(conn, _READ, (tenant, account_id)),
                     lambda: conn.execute(_READ.sql, (tenant, account_id)).fetchone()):
            with pytest.raises(Exception) as error:  # psycopg's loader reads only the ISO style of a timestamptz
                read()
            raised.append(error.value)
        assert type(raised[0]) is type(raised[1]) and str(raised[0]) == str(raised[1])
        assert before is not None


def test_a_prepared_read_that_fails_drops_its_transformer(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        _prepared(conn, tenant, account_id)
        conn.execute("SET LOCAL DateStyle = 'German, DMY'")  # the row's timestamptz no longer loads
        with pytest.raises(Exception):
            fetch_one(conn, _READ, (tenant, account_id))
        assert not hasattr(conn, "ledger_transformer")


def test_a_read_the_cursor_answers_gives_the_transformer_back(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        assert fetch_one(conn, _READ, (tenant, account_id))["id"] == account_id  # not prepared yet: the cursor
        assert hasattr(conn, "ledger_transformer")


def test_a_transformer_in_use_is_not_handed_to_another_read(services, account):
    tenant, account_id = account
    with services.db.transaction(tenant) as conn:
        _prepared(conn, tenant, account_id)
        taken = prepared_module._take_transformer(conn)  # as a read on another thread holds it
        assert not hasattr(conn, "ledger_transformer")
        assert fetch_one(conn, _READ, (tenant, account_id))["id"] == account_id
        assert conn.ledger_transformer[0] is not taken[0]


def test_a_closed_pooled_connection_lets_go_of_its_transformer(services, account):
    tenant, account_id = account
    with services.db.pool.connection() as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(tenant),))
            _prepared(conn, tenant, account_id)
        assert hasattr(conn, "ledger_transformer")
        conn.close()
        assert not hasattr(conn, "ledger_transformer")
