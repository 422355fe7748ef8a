"""Connections for requests and workers: a pool whose connections act as the application role.

One request is one transaction at REPEATABLE READ: every read sees one snapshot, and a concurrent
update of a row this transaction also updates (an account balance) fails with a serialization error
instead of being lost. Such failures surface as `Retryable`; the API retries the whole request a
bounded number of times before answering `retryable`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import InvalidInput, LedgerError, Retryable
from .prepared import _NOT_PREPARED, PreparedRead, begin_on_prepared, commit_on_prepared, forget_transformer

APP_ROLE = "ledger_app"

# Sets the tenant and the statement_timeout of a transaction opened without an `opener`.
_SET_TENANT = "SELECT set_config('ledger.tenant_id', %s, true), set_config('statement_timeout', %s, true)"

# SQLSTATEs that mean "lost a race, try again": serialization_failure, deadlock_detected.
_RACE_STATES = {"40001", "40P01"}
_DEADLINE_STATES = {"57014"}  # query_canceled (statement_timeout)
_CONNECTION_STATES_PREFIX = ("08", "57P")  # connection exceptions, admin/crash shutdown
_UNSTORABLE_STATES = {"22P05", "22021"}  # untranslatable_character, character_not_in_repertoire


class Deferred:
    """A statement sent with the connection's next one, in its round trip (see `defer`): its SQL with `$n`
    placeholders and its parameters as text, encoded once, since it is sent as a bare protocol command."""

    __slots__ = ("command", "values")

    def __init__(self, sql: str, params: Sequence[str] | None) -> None:
        values = tuple(params or ())
        if any(not isinstance(value, str) for value in values) or _placeholders(sql) != len(values):
            raise TypeError(f"a deferred statement takes one %s per parameter, each a str: {sql!r} {values!r}")
        self.command = _numbered_command(sql)
        self.values = [value.encode() for value in values] or None


# A call defers the same few texts (its savepoint's, a tool's statement_timeout) again and again.
@functools.lru_cache(maxsize=256)
def _placeholders(sql: str) -> int:
    """How many `%s` the text holds, or -1 when it holds `%%` (a deferred statement takes no escapes)."""
    return -1 if "%%" in sql else sql.count("%s")


@functools.lru_cache(maxsize=256)
def _numbered_command(sql: str) -> bytes:
    parts = sql.split("%s")
    return (parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], start=1))).encode()


def defer(conn: psycopg.Connection, sql: str, params: Sequence[str] | None = None) -> Deferred:
    """Send `sql` (whose result nobody reads) just before the connection's next statement, in the same
    round trip (a pipeline), instead of on its own; before a savepoint or the commit, it goes on its own.
    For a setting such as a narrower statement_timeout, which matters only once a statement runs; a
    failure of it is the next statement's failure. `params`: strings, one per `%s`, sent as text.
    `undefer` takes it back while it is unsent."""
    deferred = Deferred(sql, params)
    conn.ledger_deferred.append(deferred)
    return deferred


def undefer(conn: psycopg.Connection, deferred: Deferred) -> bool:
    """Take back a deferred statement not yet sent (True), or say it was sent (False)."""
    try:
        conn.ledger_deferred.remove(deferred)
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def deferred_savepoint(conn: psycopg.Connection) -> Iterator[None]:
    """A savepoint around the block, as `conn.transaction()` (rolled back when the block raises, the
    exception propagating), whose SAVEPOINT and RELEASE are deferred (`defer`): a block that makes no
    statement sends neither, and one that does pays no round trip of its own for them. Only a rollback
    goes at once: the transaction may be in a failed state, which only the rollback ends."""
    conn.ledger_savepoints += 1
    name = f"ledger_call_{conn.ledger_savepoints}"
    opened = defer(conn, f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        pending = conn.ledger_deferred
        if opened in pending:
            # Never sent: nothing to roll back; what was deferred inside the block goes with it.
            del pending[pending.index(opened):]
        else:
            # Sent, so everything still deferred was deferred inside the block: the rollback undoes it.
            pending.clear()
            if not conn.closed:
                with conn.pipeline():
                    psycopg.Cursor(conn).execute(f"ROLLBACK TO SAVEPOINT {name}")
                    psycopg.Cursor(conn).execute(f"RELEASE SAVEPOINT {name}")
        raise
    if not undefer(conn, opened):
        defer(conn, f"RELEASE SAVEPOINT {name}")


def _send_deferred(conn: psycopg.Connection) -> None:
    """The deferred statements, queued in the pipeline the caller is in, as psycopg queues its own commands
    (a BEGIN inside a pipeline): a protocol command whose result is only checked for an error, which the
    pipeline raises as the failure of the round trip they share. No cursor, no query conversion, no
    adapters: a statement sent through a cursor in a pipeline costs ~40 µs of client CPU, this a few."""
    pending, conn.ledger_deferred = conn.ledger_deferred, []
    pipeline = conn._pipeline
    send = conn.pgconn.send_query_params
    for deferred in pending:
        pipeline.command_queue.append(functools.partial(send, deferred.command, deferred.values))
        pipeline.result_queue.append(None)


def _flush_deferred(conn: psycopg.Connection) -> None:
    """The deferred statements, now, in one round trip of their own (before a savepoint or the commit)."""
    if conn.ledger_deferred:
        with conn.pipeline():
            _send_deferred(conn)


class _DeadlineCursor(psycopg.Cursor):
    """Refuses to start a statement once its transaction's deadline has passed, and sends the
    connection's deferred statements (`defer`) in the same round trip as the next one.

    statement_timeout bounds one statement; without this, a request making many short statements
    (a listing inside a listing, under many aliases) would run on long past its deadline.
    """

    def execute(self, query, params=None, **kwargs):
        deadline = getattr(self.connection, "ledger_deadline", None)
        if deadline is not None and time.monotonic() >= deadline:
            raise Retryable("the request's deadline passed", hint="retry, or allow more time with the "
                            "Request-Timeout header (and ask for less per request)")
        conn = self.connection
        if conn.ledger_deferred:
            if conn._pipeline is None:
                with conn.pipeline():
                    _send_deferred(conn)
                    return super().execute(query, params, **kwargs)
            _send_deferred(conn)
        return super().execute(query, params, **kwargs)

    def executemany(self, query, params_seq, **kwargs):
        if self.connection.ledger_deferred:
            with self.connection.pipeline():
                _send_deferred(self.connection)
                return super().executemany(query, params_seq, **kwargs)
        return super().executemany(query, params_seq, **kwargs)


def _forget_deferred(conn: "_Connection") -> None:
    """On the way back into the pool, from whatever user: a deferred statement never outlives its use."""
    conn.ledger_deferred.clear()


class _Connection(psycopg.Connection):
    """A pooled connection: its deferred statements go before a savepoint begins (its rollback would
    otherwise undo them) and before it ends."""

    ledger_deferred: list[Deferred]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ledger_deferred = []
        self.ledger_savepoints = 0  # numbers the names of `deferred_savepoint`

    def close(self) -> None:
        forget_transformer(self)  # it refers to the connection: without it a closed one is freed at once
        super().close()

    @contextlib.contextmanager
    def transaction(self, *args, **kwargs):
        """psycopg's savepoint (or transaction), with the deferred statements sent before it begins and
        before it is released; those deferred inside it are dropped when it rolls back, which undoes
        them (and a RELEASE among them names a savepoint the rollback removed)."""
        _flush_deferred(self)
        with super().transaction(*args, **kwargs) as block:
            try:
                yield block
            except BaseException:
                self.ledger_deferred.clear()
                raise
            _flush_deferred(self)


class _Pool(ConnectionPool):
    """A connection given back forgets its deferred statements, from whatever user:
    a deferred statement never outlives its use.

    Done here, on the returning thread, rather than as the pool's `reset`: with a `reset`, psycopg_pool
    hands every returned connection to one of its worker threads (a queue put and a thread wake-up per
    request, ~60 µs of CPU, and the next request waits for that thread to put the connection back); without
    one, the returning thread puts it back itself (a connection left in a transaction is still rolled back,
    a broken one still replaced)."""

    def putconn(self, conn: psycopg.Connection) -> None:
        if isinstance(conn, _Connection):
            _forget_deferred(conn)
        super().putconn(conn)


def _configure(conn: psycopg.Connection) -> None:
    conn.execute(f"SET ROLE {APP_ROLE}")
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ


# While the database does not answer, a request waits at most this long for a connection (long enough
# for the pool to try a reconnection on its behalf): it fails promptly with `retryable` instead of
# holding its client until the pool's wait or its deadline ends.
UNREACHABLE_WAIT = 1.0
# A failed reconnection is retried with a doubling delay; giving up after this many seconds starts the
# next attempt afresh (when a request needs a connection), so the delay never grows past a few seconds
# and the pool reconnects soon after a long outage ends.
RECONNECT_TIMEOUT = 5.0


# A connection a request gave back less than this long ago is handed to the next request without the
# pool's check (a round trip): it answered moments ago. Should it have broken since (the server
# restarted, or closed it), the request's first round trip finds out before anything ran, and the
# request takes another connection, checked this time (`Database.transaction`).
TRUSTED_FOR = 2.0


def _recently_returned(conn: psycopg.Connection) -> bool:
    returned_at = getattr(conn, "ledger_returned_at", None)
    return (returned_at is not None and time.monotonic() - returned_at < TRUSTED_FOR
            and conn.pgconn.transaction_status == TransactionStatus.IDLE)


class _Unreachable(BaseException):
    """Raised by the pool's connection check to stop the pool's own retry loop at once.

    The pool retries a failed check (with backoff, until the wait ends) unless the check raises a
    BaseException; an unreachable database is not worth waiting for, so the check stops it this way.
    """


class Reachability:
    """Whether the database answers, as the pool's checks of the connections it hands out found.

    A connection that fails its check may be the only broken one (an idle connection the server closed):
    then a fresh connection is tried, and only if that fails too is the database unreachable.
    """

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.unreachable_since: float | None = None
        # Set on a thread while a request waits in `Database.transaction`: only such a wait is stopped
        # early (other users of the pool, such as the queue worker's loops, keep the pool's own retries),
        # and only such a request may take a recently returned connection unchecked (`trust_recent`: it
        # takes another one if that connection turns out broken).
        self.fail_fast = threading.local()

    @property
    def reachable(self) -> bool:
        return self.unreachable_since is None

    def check(self, conn: psycopg.Connection) -> None:
        if getattr(self.fail_fast, "trust_recent", False) and _recently_returned(conn):
            conn.ledger_trusted = True
            return
        conn.ledger_trusted = False
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if self.unreachable_since is not None or not self._answers():
                if self.unreachable_since is None:
                    self.unreachable_since = time.monotonic()
                if getattr(self.fail_fast, "active", False):
                    raise _Unreachable() from None
            raise
        self.unreachable_since = None

    def _answers(self) -> bool:
        try:
            psycopg.connect(self.conninfo, connect_timeout=2).close()
            return True
        except psycopg.Error:
            return False


@dataclass
class Database:
    """The pool plus the owner conninfo (for migrations and secrets)."""

    conninfo: str
    pool: ConnectionPool
    reachability: Reachability | None = None
    # Requests that may wait for a connection at once (0: any number); beyond them a request fails at
    # once with `retryable`. Counted here, not with the pool's own max_waiting: the pool forgets a waiter
    # that timed out only when a connection comes back, so during an outage its queue fills with the
    # departed, and a request that cannot queue cannot make the pool try to reconnect either.
    max_waiting: int = 0
    _waiting: int = 0
    _waiting_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, conninfo: str, *, min_size: int = 2, max_size: int = 20, wait_timeout: float = 10.0,
             max_waiting: int = 0) -> "Database":
        """`max_waiting` bounds the requests waiting for a connection (0: unbounded); beyond it a request
        fails at once with `retryable`."""
        reachability = Reachability(conninfo)
        pool = _Pool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=wait_timeout,
            reconnect_timeout=RECONNECT_TIMEOUT,
            connection_class=_Connection,
            kwargs={"autocommit": True, "row_factory": dict_row, "cursor_factory": _DeadlineCursor},
            configure=_configure,
            check=reachability.check,
            open=False,
            name="ledger",
        )
        pool.open(wait=True, timeout=30)
        return cls(conninfo=conninfo, pool=pool, reachability=reachability, max_waiting=max_waiting)

    def _connection(self, deadline: float | None, *, trust_recent: bool = True) -> psycopg.Connection:
        """A pooled connection; `Retryable` when none comes in time. `trust_recent`: a connection returned
        moments ago may come unchecked (TRUSTED_FOR)."""
        cap = _remaining(deadline, cap=self.pool.timeout)
        if self.reachability is not None and not self.reachability.reachable:
            cap = min(cap, UNREACHABLE_WAIT)
        with self._waiting_lock:
            if self.max_waiting and self._waiting >= self.max_waiting:
                if self.reachability is not None and not self.reachability.reachable:
                    raise _unreachable()
                raise Retryable(
                    "the server is busy: too many requests are already waiting for a database connection",
                    hint="retry the request after a short backoff",
                )
            self._waiting += 1
        if self.reachability is not None:
            self.reachability.fail_fast.active = True
            self.reachability.fail_fast.trust_recent = trust_recent
        try:
            return self.pool.getconn(timeout=cap)
        except _Unreachable:
            raise _unreachable() from None
        except PoolTimeout as exc:
            if self.reachability is not None and not self.reachability.reachable:
                raise _unreachable() from exc
            raise Retryable(
                "the server is busy: no database connection became free in time",
                hint="retry the request after a short backoff",
            ) from exc
        finally:
            if self.reachability is not None:
                self.reachability.fail_fast.active = self.reachability.fail_fast.trust_recent = False
            with self._waiting_lock:
                self._waiting -= 1

    def close(self) -> None:
        self.pool.close()

    @contextlib.contextmanager
    def transaction(
        self,
        tenant_id: object | None,
        *,
        deadline: float | None = None,
        rollback: bool = False,
        first: Sequence[tuple[str, object]] = (),
        opener: tuple[str, tuple] | None = None,
    ) -> Iterator[psycopg.Connection]:
        """One transaction, scoped to a tenant by RLS, bounded by an absolute monotonic deadline.

        BEGIN, the tenant's set_config and `first` (the (sql, params) statements the caller runs first,
        such as reading its client) go to the server together in one round trip (a pipeline); the first
        row each of them returns (or None) is in `conn.ledger_first`, in order.

        `opener`: a statement that sets the tenant and the statement_timeout itself, given `tenant_id` as
        its first parameter and the timeout in ms as its last (both added here), sent instead of the
        set_config, before `first`: one statement less in the pipeline (~50 µs of client CPU). Its first
        row comes first in `conn.ledger_first`.
        """
        timeout_ms = max(1, int(_remaining(deadline, cap=300.0) * 1000))
        if opener is not None:
            first = [(opener[0], (tenant_id, *opener[1], str(timeout_ms))), *first]
        conn, block = self._begin(tenant_id, deadline, timeout_ms, rollback, first, sets_tenant=opener is not None)
        try:
            with translate_db_errors():
                try:
                    yield conn
                except BaseException as exc:
                    conn.ledger_deferred.clear()  # rolled back: nothing they would set matters
                    if block.status == block.Status.ACTIVE:  # else `commit_with` ended it
                        block.__exit__(type(exc), exc, exc.__traceback__)
                    raise
                if block.status == block.Status.ACTIVE:  # else `commit_with` committed it
                    _flush_deferred(conn)
                    block.__exit__(None, None, None)
        finally:
            conn.ledger_block = None
            self._give_back(conn)

    def _begin(self, tenant_id: object | None, deadline: float | None, timeout_ms: int, rollback: bool,
               first: Sequence[tuple[str, object]], *,
               sets_tenant: bool = False) -> tuple[psycopg.Connection, psycopg.Transaction]:
        """A connection in a new transaction: BEGIN, the tenant, `first`, in one round trip. A connection
        that came unchecked (TRUSTED_FOR) and turns out broken here, before anything ran, is dropped, and
        the transaction begins again on another one, checked, as the pool's check would have done."""
        trust_recent = True
        while True:
            conn = self._connection(deadline, trust_recent=trust_recent)
            conn.ledger_deadline = deadline  # read by _DeadlineCursor before every statement
            # The Transaction itself, not conn.transaction(): entered inside a pipeline, that context
            # manager would keep the connection in pipeline mode until the transaction ends.
            block = psycopg.Transaction(conn, force_rollback=rollback)
            tenant = [] if sets_tenant else [(_SET_TENANT, (str(tenant_id) if tenant_id else "", str(timeout_ms)))]
            try:
                # Without psycopg's pipeline when every statement is one psycopg has prepared (~50 µs of
                # client CPU a statement less); the same rows, errors and transaction either way.
                rows = begin_on_prepared(conn, block, [*tenant, *first])
                if rows is None:
                    with conn.pipeline():
                        block.__enter__()
                        cursors = [conn.execute(*statement) for statement in [*tenant, *first]]
                    rows = [cursor.fetchone() for cursor in cursors]
                conn.ledger_first = rows[len(tenant):]
                conn.ledger_block = block  # for `commit_with`
                return conn, block
            except BaseException as exc:
                if block.status == block.Status.ACTIVE:  # entered, and not yet exited
                    with contextlib.suppress(Exception):
                        block.__exit__(type(exc), exc, exc.__traceback__)
                self._give_back(conn)
                if getattr(conn, "ledger_trusted", False) and conn.closed and isinstance(exc, psycopg.OperationalError):
                    trust_recent = False
                    continue
                with translate_db_errors():
                    raise

    def dedicated_connection(self) -> psycopg.Connection:
        """A connection set up as the pool's are (role, rows as dicts, autocommit), but outside the pool:
        for a loop that uses one all the time (a worker's claims), so that no pool's check precedes each use."""
        conn = psycopg.connect(self.conninfo, autocommit=True, row_factory=dict_row)
        _configure(conn)
        return conn

    def _give_back(self, conn: psycopg.Connection) -> None:
        conn.ledger_deadline = None  # its deferred statements are forgotten by the pool (_Pool.putconn)
        conn.ledger_returned_at = time.monotonic()
        self.pool.putconn(conn)


def commit_with(conn: psycopg.Connection, statement: PreparedRead, params: tuple) -> dict | None:
    """`statement`'s first row (or None), run as the last statement of the `Database.transaction` the
    connection is in, with the COMMIT that ends it in the same round trip when psycopg has prepared the
    statement (`prepared.commit_on_prepared`); otherwise through the cursor, the transaction's end
    committing it as ever. Either way nothing may run on the connection after it: the caller's block
    only ends. A failure of the statement leaves the transaction to roll back on both paths; a failure of
    the COMMIT is raised from here instead of from the block's end."""
    block = getattr(conn, "ledger_block", None)
    if block is not None:
        row = commit_on_prepared(conn, block, statement, params)
        if row is not _NOT_PREPARED:
            return row
    return conn.execute(statement.sql, params).fetchone()


def _unreachable() -> Retryable:
    return Retryable("the database is not answering",
                     hint="retry the request shortly; the server reconnects by itself")


def _remaining(deadline: float | None, *, cap: float) -> float:
    if deadline is None:
        return cap
    left = deadline - time.monotonic()
    if left <= 0:
        raise Retryable("the request's deadline passed", hint="retry with a longer Request-Timeout")
    return min(left, cap)


def is_race(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) in _RACE_STATES


@contextlib.contextmanager
def translate_db_errors() -> Iterator[None]:
    """Turn the database's transient failures into `Retryable`; others pass through."""
    try:
        yield
    except LedgerError:
        raise
    except psycopg.Error as exc:
        raise as_ledger_error(exc) from exc


def as_ledger_error(exc: psycopg.Error) -> Exception:
    state = getattr(exc, "sqlstate", None) or ""
    if state in _UNSTORABLE_STATES or (isinstance(exc, psycopg.DataError) and "NUL (0x00)" in str(exc)):
        # psycopg refuses a NUL in a text parameter; PostgreSQL refuses `\u0000` in jsonb.
        return InvalidInput("a string holds a character the database cannot store: NUL (\\u0000)",
                            hint="remove the NUL characters from the strings sent")
    if state in _RACE_STATES:
        retry = Retryable(
            "the transaction conflicted with a concurrent one and was rolled back",
            hint="retry the request in a new transaction",
        )
        retry.race = True
        return retry
    if state in _DEADLINE_STATES:
        return Retryable("the request's deadline passed while the database was working",
                         hint="retry, or allow more time with the Request-Timeout header")
    if isinstance(exc, (psycopg.OperationalError, pgerrors.AdminShutdown)) or state.startswith(_CONNECTION_STATES_PREFIX):
        return Retryable("the database connection was interrupted", hint="retry the request")
    return exc


def transient_failure(exc: BaseException | None) -> Retryable | None:
    """The `Retryable` a failure amounts to (a lost race, a deadline, a dropped connection), or None."""
    if isinstance(exc, Retryable):
        return exc
    if isinstance(exc, psycopg.Error):
        translated = as_ledger_error(exc)
        if isinstance(translated, Retryable):
            return translated
    return None
