"""A statement psycopg has prepared on a connection, run on libpq's prepared-statement call without a cursor.

A psycopg `conn.execute(...).fetchone()` spends more of its client CPU in the cursor's Python (the query's
conversion, the prepare manager's bookkeeping, the cursor's result state) than in libpq: ~45–80 µs a
call on this machine against ~20–30 µs for the same statement sent with `send_query_prepared` and its
row loaded by the same Transformer (a call tree's read makes one such statement per `graphql()`).

Which statements are prepared on a connection stays psycopg's business: this path runs a statement only
under the name psycopg's own prepare manager gave it (after its fifth use through a cursor), looked up by
psycopg's own key, and takes the cursor otherwise. So when psycopg forgets its statements (it sends
DEALLOCATE ALL after any ROLLBACK or DDL it sees, and evicts the least recently used past 100), this path
forgets them in the same moment. What it keeps from psycopg besides: the loaders and dumpers (a
`Transformer` over the connection's adapters, kept on the connection between statements: no result
outlives its statement), the connection's lock, `conn.wait` on psycopg's own `execute` generator (so a
broken connection or an interrupted wait fails as in a cursor), and `error_from_result` for a failed
statement (the same exception class, SQLSTATE and diagnostics).

The connection's deferred statements (db/pool.py `defer`: a call's SAVEPOINT, a tool's statement_timeout)
go first, in the same round trip, as the pool's cursor sends them: in one libpq pipeline with the
statement, each a bare protocol command whose result is only checked for an error, the first error
raised as the round trip's failure (psycopg's own pipeline, which the cursor enters for them, costs more
client CPU than the statement itself). Anything else out of the ordinary takes the cursor, which answers
it as always: a connection in psycopg's pipeline, a closed connection, one whose rows are not dicts, a
transaction past its deadline (the pool's cursor refuses it), a statement psycopg has not prepared.

It is for statements of a fixed text that answer rows, whose columns' names it keeps: a SELECT, or a
write that returns what it wrote (a failure of either raises what the cursor raises; a statement that
answers no rows raises what the cursor's fetch raises). A module's hot statement is a `PreparedRead`
constant; any other text that `Scope.one`/`all` run gets one kept by its text (`statement_of`), so every
statement a connection runs often enough for psycopg to prepare it takes this path.

A request's opening (db/pool.py `Database._begin`: BEGIN, the statement setting the tenant, the caller's
first reads) takes it too, as one libpq pipeline, once psycopg has prepared each of its statements
(`begin_on_prepared`): the `psycopg.Transaction` is entered with the bookkeeping its own `__enter__` does
and BEGIN is the command it would send, so its `__exit__`, its savepoints and `conn.transaction()` inside
it work as ever. psycopg forgets its prepared statements on any rollback, a savepoint's included: the
opening after one goes through psycopg's pipeline again, until its statements are prepared anew.

A transaction's last statement and its COMMIT go as one libpq pipeline the same way (`commit_on_prepared`,
for db/pool.py `commit_with`): the server skips the COMMIT when a statement before it fails, and the
`psycopg.Transaction` is ended with the bookkeeping its own commit does only once the statement answered.
"""


from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg
from psycopg import adapt, pq
from psycopg import errors as pgerrors
from psycopg.generators import execute as _execute
from psycopg.generators import fetch_many as _fetch_many
from psycopg.generators import send as _send
from psycopg.rows import dict_row

try:  # psycopg's own conversion, so that the key is psycopg's key
    from psycopg._queries import _query2pg
except ImportError:  # a psycopg whose internals moved: every read takes the cursor
    _query2pg = None


def _internals_present() -> bool:
    """Whether this psycopg has the private parts this path reads (written against 3.3): a release that
    moved them makes every read take the cursor instead of failing."""
    if _query2pg is None:
        return False
    try:
        from psycopg._preparing import PrepareManager

        from psycopg._connection_base import BaseConnection

        manager = PrepareManager()
        # What the opening and the commit read and set of a Transaction and its connection (instance
        # attributes set in their __init__).
        transaction_init = psycopg.Transaction.__init__.__code__.co_names
        return (hasattr(manager._names, "move_to_end") and hasattr(manager, "_to_flush")
                and hasattr(pq.PGconn, "send_query_prepared")
                and all(hasattr(psycopg.Transaction, name)
                        for name in ("_push_savepoint", "_pop_savepoint", "_get_enter_commands"))
                and all(name in transaction_init for name in ("_outer_transaction", "_stack_index", "_savepoint_name"))
                and "_num_transactions" in BaseConnection.__init__.__code__.co_names)
    except Exception:  # noqa: BLE001 - any difference at all means: do not use it
        return False


SUPPORTED = _internals_present()

_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_CONN_OK = pq.ConnStatus.OK
_TEXT = pq.Format.TEXT


class PreparedRead:
    """A statement with `%s` placeholders that answers rows, each as a dict (`fetch_one`, `fetch_all`)."""

    __slots__ = ("sql", "query", "formats", "count", "names")

    def __init__(self, sql: str) -> None:
        self.sql = sql  # what the cursor runs when this path does not
        if not sql.isascii():
            raise ValueError("a prepared read takes %s placeholders in an ASCII text")
        self.query, self.formats, self.count = None, None, -1  # -1: no call takes this path
        if SUPPORTED:
            self.query, self.formats, order, _parts = _query2pg(sql.encode(), "utf-8")
            if order is not None:
                raise ValueError("a prepared read takes %s placeholders, not named ones")
            self.count = len(self.formats)
        self.names: tuple[str, ...] | None = None  # its columns' names, once a result shows them


_BY_TEXT: dict[str, PreparedRead | None] = {}
# Texts kept before starting over: far more than the statements the ledger's code has (texts built with
# a varying part, such as a listing's filters, would otherwise grow the dictionary without end).
_BY_TEXT_LIMIT = 1024


def statement_of(sql: str) -> PreparedRead | None:
    """The `PreparedRead` of a statement text, kept by the text; None for one this path does not take
    (named placeholders, or any text psycopg's conversion refuses: the cursor then raises its error)."""
    try:
        return _BY_TEXT[sql]
    except KeyError:
        pass
    statement = None
    if SUPPORTED:
        try:
            statement = PreparedRead(sql)
        except Exception:  # noqa: BLE001 - the cursor reports whatever is wrong with the text
            statement = None
    if len(_BY_TEXT) >= _BY_TEXT_LIMIT:
        _BY_TEXT.clear()
    _BY_TEXT[sql] = statement  # racing threads store equal statements: the last write wins harmlessly
    return statement


def fetch_one(conn: psycopg.Connection, statement: PreparedRead, params: tuple) -> dict | None:
    """`conn.execute(statement.sql, params).fetchone()`, as a dict row: the same row, or the same error."""
    rows = _prepared_rows(conn, statement, params, True)
    if rows is _NOT_PREPARED:
        return conn.execute(statement.sql, params).fetchone()
    return rows


def fetch_all(conn: psycopg.Connection, statement: PreparedRead, params: tuple) -> list[dict]:
    """`conn.execute(statement.sql, params).fetchall()`, as dict rows: the same rows, or the same error."""
    rows = _prepared_rows(conn, statement, params, False)
    if rows is _NOT_PREPARED:
        return conn.execute(statement.sql, params).fetchall()
    return rows


_NOT_PREPARED = object()


def _prepared_rows(conn: psycopg.Connection, statement: PreparedRead, params: tuple, first: bool) -> object:
    """The statement's first row or None (`first`), or its rows; `_NOT_PREPARED` when the cursor must run it."""
    # The count first: it is -1 when this psycopg lacks the parts below, which are then never touched.
    if (len(params) == statement.count and conn._pipeline is None and conn.row_factory is dict_row
            and not conn.closed and not _past_deadline(conn)):
        try:
            return _run(conn, statement, params, first)
        except pgerrors._NO_TRACEBACK as ex:  # as psycopg's cursor raises them: without its frames
            raise ex.with_traceback(None)
    return _NOT_PREPARED


def _past_deadline(conn: psycopg.Connection) -> bool:
    deadline = getattr(conn, "ledger_deadline", None)
    return deadline is not None and time.monotonic() >= deadline


def _use_prepared_name(conn: psycopg.Connection, key: tuple) -> bytes | None:
    """The name psycopg prepared `key` under on `conn`, counted as a use in its LRU as a cursor's would be;
    None when it is not prepared (yet) or psycopg has statements of its own to drop first. Call it holding
    `conn.lock`."""
    manager = conn._prepared
    name = manager._names.get(key)
    if name is None or manager._to_flush:
        return None
    manager._names.move_to_end(key)
    return name


# Each statement below takes the connection's Transformer, does its work in a function of it (`_run_on`,
# `_open_on`, `_last_and_commit_on`) and gives it back once that returns, whatever it returns; when that
# raises, the Transformer is dropped, since a failure may leave it holding a result or part of a row's load
# (the next statement makes a new one). Not a context manager: its __init__, __enter__ and __exit__, called
# from C, cost ~3k instructions a read (bench.asgi_tree --callgrind), more than the rest of this bookkeeping.
def _run(conn: psycopg.Connection, statement: PreparedRead, params: tuple, first: bool) -> object:
    kept = _take_transformer(conn)
    rows = _run_on(kept[0], conn, statement, params, first)
    _give_back_transformer(conn, kept)
    return rows


def _run_on(tx: adapt.Transformer, conn: psycopg.Connection, statement: PreparedRead, params: tuple,
            first: bool) -> object:
    values = tx.dump_sequence(params, statement.formats)
    key = (statement.query, tx.types or ())
    pgconn = conn.pgconn
    with conn.lock:
        name = _use_prepared_name(conn, key)
        if name is None:
            return _NOT_PREPARED
        deferred = getattr(conn, "ledger_deferred", None)
        if deferred:
            conn.ledger_deferred = []  # sent once, whatever happens next, as the pool's cursor sends them
            groups = conn.wait(_in_one_pipeline(pgconn, [(d.command, d.values) for d in deferred],
                                                [(name, values, tx.formats)]))
            _raise_first_failure(groups[:-1], pgconn)
            results = groups[-1]
        else:
            pgconn.send_query_prepared(name, values, param_formats=tx.formats, result_format=_TEXT)
            results = conn.wait(_execute(pgconn))
    result = results[0] if len(results) == 1 else None
    if result is None or result.status != _TUPLES_OK:
        raise _failure(conn, result)
    names = _columns(statement, result, pgconn)
    ntuples = result.ntuples
    if not ntuples:
        return None if first else []
    tx.set_pgresult(result)
    if first:
        rows = dict(zip(names, tx.load_row(0, tuple)))
    else:
        rows = [dict(zip(names, row)) for row in tx.load_rows(0, ntuples, tuple)]
    tx.set_pgresult(None)  # the result is not kept with the Transformer
    return rows


def _settings(pgconn: pq.abc.PGconn) -> tuple:
    """What a Transformer's loaders and dumpers read of the connection when they are made, and keep: the
    client encoding (text), DateStyle and TimeZone (dates and times), IntervalStyle (intervals). psycopg
    makes a Transformer per query on the assumption that they do not change meanwhile."""
    status = pgconn.parameter_status
    return status(b"client_encoding"), status(b"DateStyle"), status(b"IntervalStyle"), status(b"TimeZone")


def _take_transformer(conn: psycopg.Connection) -> tuple:
    """(a Transformer over the connection's adapters, the settings it was made under), the connection's
    kept one when the settings are still those it was made under, a new one otherwise.

    A Transformer looks its loaders and dumpers up in the connection's adapters and makes each one the
    first time it meets a type (Python code, a timestamptz loader reading the connection's time zone):
    a new one per statement did that for every column of every row a tree's read loads. A kept one answers
    the same (psycopg's own cursor keeps its Transformer while it runs the same query again); the ledger
    registers no adapters of its own. It is taken off the connection while in use (a dict's pop is atomic),
    so that two threads on one connection never share one; a failure on the way drops it."""
    kept = vars(conn).pop("ledger_transformer", None)
    settings = _settings(conn.pgconn)
    if kept is not None and kept[1] == settings:
        return kept
    return adapt.Transformer(conn), settings


def _give_back_transformer(conn: psycopg.Connection, kept: tuple) -> None:
    vars(conn)["ledger_transformer"] = kept


def forget_transformer(conn: psycopg.Connection) -> None:
    """Drop the connection's kept Transformer (which refers to the connection): for a connection closing."""
    vars(conn).pop("ledger_transformer", None)


def _in_one_pipeline(pgconn: pq.abc.PGconn, commands: list[tuple[bytes, Any]],
                     prepared: list[tuple[bytes, list, list]], after: tuple[bytes, ...] = ()) -> Any:
    """The generator sending `commands` ((command, parameter values or None), each a bare protocol command,
    as psycopg sends one in its pipeline), then the `prepared` statements ((name, values, formats)), then
    the bare commands `after`, in one libpq pipeline, then a sync: each one's results, in order (after a
    failure, the server skips the rest until the sync: their results say so). A connection that broke on
    the way is not taken out of pipeline mode (as psycopg's pipeline leaves it): its results' error is
    raised instead."""
    pgconn.enter_pipeline_mode()
    try:
        for command, values in commands:
            pgconn.send_query_params(command, values, result_format=_TEXT)
        for name, values, formats in prepared:
            pgconn.send_query_prepared(name, values, param_formats=formats, result_format=_TEXT)
        for command in after:
            pgconn.send_query_params(command, None, result_format=_TEXT)
        pgconn.pipeline_sync()
        yield from _send(pgconn)
        groups = []
        for _ in range(len(commands) + len(prepared) + len(after) + 1):  # each one's results, then the sync's
            groups.append((yield from _fetch_many(pgconn)))
    except BaseException:
        if pgconn.status == _CONN_OK:
            with contextlib.suppress(psycopg.Error):
                pgconn.exit_pipeline_mode()
        raise
    if pgconn.status == _CONN_OK:
        pgconn.exit_pipeline_mode()
    return groups[:-1]


def _raise_first_failure(groups: list, pgconn: pq.abc.PGconn) -> None:
    """The first failed statement's error, as psycopg's pipeline raises it when it ends."""
    for results in groups:
        for result in results:
            if result.status == _FATAL_ERROR:
                raise pgerrors.error_from_result(result, encoding=pgconn._encoding)


def _columns(statement: PreparedRead, result: Any, pgconn: pq.abc.PGconn) -> tuple[str, ...]:
    """The names of the columns the statement's text selects (the same on every connection), kept by it."""
    names = statement.names
    if names is None:
        encoding = pgconn._encoding
        names = statement.names = tuple(result.fname(i).decode(encoding) for i in range(result.nfields))
    return names


def _failure(conn: psycopg.Connection, result: Any) -> Exception:
    """What the cursor's fetch raises for a result that holds no rows."""
    if result is None:
        if conn.pgconn.status != _CONN_OK:  # its results lost with the connection
            return psycopg.OperationalError("the connection is closed")
        return pgerrors.InternalError("unexpected results from a prepared statement: not one result")
    if result.status == _FATAL_ERROR:
        return pgerrors.error_from_result(result, encoding=conn.pgconn._encoding)
    if result.command_status:
        detail = f" (command status: {result.command_status.decode()})"
    else:
        detail = f" (result status: {pq.ExecStatus(result.status).name})"
    return pgerrors.ProgrammingError(f"the last operation didn't produce records{detail}")


_ACTIVE = psycopg.Transaction.Status.ACTIVE
_IDLE = pq.TransactionStatus.IDLE


def begin_on_prepared(conn: psycopg.Connection, block: psycopg.Transaction,
                      statements: list[tuple[str, Any]]) -> list[dict | None] | None:
    """BEGIN (the transaction `block`'s own enter commands) and `statements` ((sql, params) each, run in
    order) in one libpq pipeline, when psycopg has prepared every one of them on the connection: each
    statement's first row (or None), in order, as `conn.execute(sql, params).fetchone()` in psycopg's
    pipeline answers. From the moment anything is sent, `block` is entered as its `__enter__` enters it
    (status, psycopg's count of the connection's transactions), so its `__exit__` commits or rolls back
    as ever, and a failure is raised with it entered: the first statement's error that psycopg's
    pipeline would raise, else what the cursor's fetch raises for a statement that answers no rows.

    None, with nothing sent and `block` untouched, whenever the cursor must run them instead: a statement
    psycopg has not prepared (or parameters it would dump otherwise), the connection in psycopg's
    pipeline, in a transaction, closed, with deferred statements or past its deadline, psycopg with
    statements of its own to drop first."""
    if (not SUPPORTED or conn._pipeline is not None or conn.row_factory is not dict_row or conn.closed
            or getattr(conn, "ledger_deferred", None) or _past_deadline(conn)
            or conn.pgconn.transaction_status != _IDLE or block.status != block.Status.NOT_STARTED):
        return None
    kept = _take_transformer(conn)
    rows = _open_on(kept[0], conn, block, statements)
    _give_back_transformer(conn, kept)
    return rows


def _open_on(tx: adapt.Transformer, conn: psycopg.Connection, block: psycopg.Transaction,
             statements: list[tuple[str, Any]]) -> list[dict | None] | None:
    planned = []
    for sql, params in statements:
        if params is None and "%" not in sql:
            params = ()  # psycopg converts no text without parameters, nor one without a %
        statement = statement_of(sql) if isinstance(params, (tuple, list)) else None
        if statement is None or len(params) != statement.count:
            return None
        try:
            values = tx.dump_sequence(params, statement.formats)
        except Exception:  # noqa: BLE001 - the cursor raises its own error for the value
            return None
        planned.append((statement, (statement.query, tx.types or ()), values, tx.formats))
    pgconn = conn.pgconn
    with conn.lock:
        manager = conn._prepared
        if manager._to_flush:
            return None
        names = [manager._names.get(key) for _statement, key, _values, _formats in planned]
        if None in names:
            return None
        for _statement, key, _values, _formats in planned:
            manager._names.move_to_end(key)  # a use, as a cursor's would count in psycopg's LRU
        # What Transaction._enter_gen does before it sends its commands.
        block.status = _ACTIVE
        block._push_savepoint()
        commands = list(block._get_enter_commands())
        try:
            groups = conn.wait(_in_one_pipeline(
                pgconn, [(command, None) for command in commands],
                [(name, values, formats) for name, (_statement, _key, values, formats) in zip(names, planned)]))
        except pgerrors._NO_TRACEBACK as ex:  # as psycopg's pipeline raises them: without its frames
            raise ex.with_traceback(None)
    _raise_first_failure(groups, pgconn)
    rows = []
    for (statement, _key, _values, _formats), results in zip(planned, groups[len(commands):]):
        result = results[0] if len(results) == 1 else None
        if result is None or result.status != _TUPLES_OK:
            raise _failure(conn, result)
        names_of = _columns(statement, result, pgconn)
        if result.ntuples:
            tx.set_pgresult(result)
            rows.append(dict(zip(names_of, tx.load_row(0, tuple))))
        else:
            rows.append(None)
    tx.set_pgresult(None)
    return rows


_COMMITTED = psycopg.Transaction.Status.COMMITTED
_INTRANS = pq.TransactionStatus.INTRANS
_COMMIT = b"COMMIT"


def commit_on_prepared(conn: psycopg.Connection, block: psycopg.Transaction, statement: PreparedRead,
                       params: tuple) -> object:
    """`statement` as the last of the transaction `block`, and the COMMIT that ends it, in one libpq pipeline
    (the connection's deferred statements first, as the pool's cursor sends them), when psycopg has prepared
    the statement on the connection: its first row (or None).

    A failure of a deferred statement or of `statement` is raised with `block` still entered, the server
    having skipped the COMMIT (the transaction is in its failed state), so that the block's `__exit__` rolls
    it back as it does when that statement fails through a cursor; so is a connection lost on the way. Once
    `statement` answered, `block` ends as its own commit ends it (psycopg's count of the connection's
    transactions, its status COMMITTED) and a failed COMMIT raises its error, as the block's `__exit__`
    raises it: the caller must not exit it again.

    `_NOT_PREPARED`, with nothing sent and `block` untouched, whenever this cannot be done exactly so: the
    statement not prepared (or parameters psycopg would dump otherwise), the connection in psycopg's
    pipeline, closed, not in a healthy transaction of `block` alone (a savepoint open, a forced rollback),
    past its deadline, psycopg with statements of its own to drop first."""
    if (len(params) != statement.count or conn._pipeline is not None or conn.row_factory is not dict_row
            or conn.closed or _past_deadline(conn) or block.status != _ACTIVE or block.force_rollback
            or not block._outer_transaction or block._savepoint_name or block._stack_index != 0
            or conn._num_transactions != 1 or conn.pgconn.transaction_status != _INTRANS):
        return _NOT_PREPARED
    kept = _take_transformer(conn)
    answered = _last_and_commit_on(kept[0], conn, statement, params)
    _give_back_transformer(conn, kept)
    if answered is _NOT_PREPARED:
        return _NOT_PREPARED
    row, commit_results = answered
    # What Transaction._commit_gen does around the COMMIT it sends (the nesting was checked above).
    block._pop_savepoint("commit")
    block.status = _COMMITTED
    _raise_first_failure(commit_results, conn.pgconn)
    return row


def _last_and_commit_on(tx: adapt.Transformer, conn: psycopg.Connection, statement: PreparedRead,
                        params: tuple) -> object:
    """`commit_on_prepared`'s round trip: `_NOT_PREPARED`, or the statement's row (or None) and the COMMIT's
    results; a failure of the deferred statements or of the statement raised."""
    values = tx.dump_sequence(params, statement.formats)
    key = (statement.query, tx.types or ())
    pgconn = conn.pgconn
    with conn.lock:
        name = _use_prepared_name(conn, key)
        if name is None:
            return _NOT_PREPARED
        deferred, conn.ledger_deferred = getattr(conn, "ledger_deferred", None) or [], []
        commands = [(d.command, d.values) for d in deferred]
        try:
            groups = conn.wait(_in_one_pipeline(pgconn, commands, [(name, values, tx.formats)], (_COMMIT,)))
        except pgerrors._NO_TRACEBACK as ex:  # as psycopg raises them: without its frames
            raise ex.with_traceback(None)
    _raise_first_failure(groups[:len(commands)], pgconn)
    results = groups[len(commands)]
    result = results[0] if len(results) == 1 else None
    if result is None or result.status != _TUPLES_OK:
        raise _failure(conn, result)
    names = _columns(statement, result, pgconn)
    row = None
    if result.ntuples:
        tx.set_pgresult(result)
        row = dict(zip(names, tx.load_row(0, tuple)))
        tx.set_pgresult(None)
    return row, groups[len(commands) + 1:]
