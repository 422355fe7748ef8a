"""The request transaction that `/graphql` and `/mcp/<name>` share (DESIGN 3: one request, one transaction).

BEGIN, the tenant's set_config, the caller's client row (with the tenant's trigger version, for the
events the request raises) and any statements the endpoint sends with it go to the database in one
round trip; the client is checked (it exists, it is enabled) before anything else runs, and the
request's scope starts with the client's layer.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ..auth.clients import client_layer, load_principal, opening_query
from ..policy.chain import Chain, Layer
from ..policy.principal import Principal
from ..queue.triggers import remember_version
from ..scope import Scope
from ..services import Services

log = logging.getLogger("ledger.http")


@dataclass(frozen=True)
class RequestTransaction:
    """An open request transaction, its caller read in it."""

    conn: psycopg.Connection
    services: Services
    principal: Principal
    policies: list[dict]
    deadline: float
    triggers_version: int | None
    # The first row of each statement sent with the client's (`also`), in order (None when there is none).
    rows: list[Any]

    def client_layer(self) -> Layer:
        return client_layer(self.principal, self.policies)

    def scope(self, *, dry_run: bool = False, request_state: dict | None = None) -> Scope:
        """A scope of this transaction (`request_state`: the attempt's, when the caller keeps it)."""
        scope = Scope(conn=self.conn, principal=self.principal, chain=Chain((self.client_layer(),)),
                      services=self.services, deadline=self.deadline, dry_run=dry_run,
                      request_state={} if request_state is None else request_state)
        remember_version(scope, self.triggers_version)
        return scope


@contextlib.contextmanager
def request_transaction(services: Services, claims: Any, deadline: float, *, rollback: bool = False,
                        also: Sequence[tuple[str, object]] = ()) -> Iterator[RequestTransaction]:
    """The request's transaction for the token's `claims`: `Unauthenticated` (rolling back) when its client
    does not exist or is disabled. `also`: statements sent in the same round trip, after the client's."""
    # The client's row and the tenant's trigger version, read by the statement that sets the tenant.
    client = opening_query(claims.client_id)
    with services.db.transaction(claims.tenant_id, deadline=deadline, rollback=rollback, opener=client,
                                 first=also) as conn:
        client_row, *rows = conn.ledger_first
        principal, policies = load_principal(conn, claims.tenant_id, claims.client_id, claims.raw, row=client_row)
        yield RequestTransaction(conn, services, principal, policies, deadline, client_row["triggers_version"],
                                 rows)


class _Discarded(Exception):
    """Ends a held transaction that nothing used: it rolls back."""


class HeldTransaction:
    """A request transaction opened in one step of a request and used by a later one, on another thread:
    the MCP route opens it (to answer 401 or 404 itself), the SDK's handler runs in it.

    `take()` hands it over once; `use()` then runs it as a `with` block would (commit at the end, roll
    back on an exception). One that nobody takes is `discard()`ed: rolled back, its connection returned.
    The steps never overlap, so the connection is used by one thread at a time.
    """

    def __init__(self, manager: contextlib.AbstractContextManager[RequestTransaction],
                 transaction: RequestTransaction) -> None:
        self._manager = manager
        self.transaction = transaction
        self._lock = threading.Lock()
        self._held = True

    @classmethod
    def open(cls, services: Services, claims: Any, deadline: float, *,
             also: Sequence[tuple[str, object]] = ()) -> "HeldTransaction":
        manager = request_transaction(services, claims, deadline, also=also)
        return cls(manager, manager.__enter__())

    @property
    def held(self) -> bool:
        """Whether no step has taken it yet."""
        return self._held

    def take(self) -> "HeldTransaction | None":
        """This transaction for the one step that takes it first; None for any other."""
        with self._lock:
            taken, self._held = self._held, False
        return self if taken else None

    @contextlib.contextmanager
    def use(self) -> Iterator[RequestTransaction]:
        try:
            yield self.transaction
        except BaseException as exc:
            if not self._manager.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            self._manager.__exit__(None, None, None)

    def discard(self) -> None:
        """Roll it back unless a step took it (idempotent)."""
        if self.take() is None:
            return
        try:
            self._manager.__exit__(_Discarded, _Discarded(), None)
        except Exception:  # noqa: BLE001 - the rollback of an unused transaction failed: its connection is dropped
            log.warning("rolling back an unused request transaction failed", exc_info=True)
