"""The long-lived parts one process shares between requests, and the ports through which the layers
below reach what is built above them. `ledger.wiring` builds one `Services` per process.

A port is the small interface a lower layer needs, not the module that provides it: the call engine
runs `graphql()` through `GraphQLRunner` without knowing the HTTP API exists, and the registry checks
programs statically through `ProgramAnalyzer` without importing the schema.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .config import Settings
from .db.pool import Database
from .models import ModelProviders
from .runtime import ExecutorPool

if TYPE_CHECKING:
    from .scope import Scope


class GraphQLRunner(Protocol):
    """Runs a document on the scope's transaction, under its chain: `(data, errors)`, the errors in the
    GraphQL response format. Raises `Retryable` for a transient failure (the request retries as a whole)."""

    def __call__(self, scope: "Scope", document: str, variables: dict | None,
                 operation_name: str | None) -> tuple[Any, list[dict] | None]: ...


class ProgramAnalyzer(Protocol):
    """The static problems of a program's source (documents passed to `graphql()`, undeclared tools)."""

    def __call__(self, source: str, declared_tools: set[str]) -> list: ...


class TokenIssuer(Protocol):
    def mint(self, tenant_id: uuid.UUID, client_id: uuid.UUID, ttl_seconds: int | None = None,
             *, now: int | None = None, mcp_server: uuid.UUID | None = None) -> tuple[str, int | None]: ...

    def verify(self, token: str) -> Any: ...


class ChildIds(Protocol):
    """The executionIds the ledger derives for the calls an execution makes (only the server can)."""

    def child(self, parent: uuid.UUID, attempt: int, sequence: int) -> uuid.UUID: ...

    def children_of(self, parent: uuid.UUID, attempt: int) -> Callable[[int], uuid.UUID]: ...

    def triggered(self, trigger: uuid.UUID, cause: uuid.UUID, sequence: int) -> uuid.UUID: ...


class RecordEvents(Protocol):
    """Record events (DESIGN 15): told of every write that the section's table names, in the writing
    transaction, it queues the runs of the matching enabled triggers on that same transaction. It never
    fails the write (a run that cannot run is queued failed); `Retryable` and database errors propagate.

    `record` is the row as written (column names), `previous` its values before an update (None for an
    insert). Lower layers (the domain, the execution records) raise events through this port, without
    knowing the queue exists."""

    def raised(self, scope: "Scope", event_type: str, record_type: str, record: dict,
               previous: dict | None = None) -> None: ...


@dataclass
class Services:
    settings: Settings
    db: Database
    tokens: TokenIssuer
    execution_ids: ChildIds
    graphql: GraphQLRunner
    # Record events start the matching triggers' runs (queue/triggers.py, wired in ledger/wiring.py).
    record_events: RecordEvents
    analyze_program: ProgramAnalyzer | None = None
    # The model providers of the models file (`settings.models_file`), for agents and model tools.
    models: ModelProviders = field(default_factory=ModelProviders.empty)
    # The sandbox executor processes (`settings.executors` of them), started on the first program run.
    _executor_pool: ExecutorPool | None = field(default=None, init=False, repr=False)
    _executor_pool_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def executor_pool(self) -> ExecutorPool:
        """The executor pool, started now if it is not yet."""
        # Many request threads may ask at once on a fresh process: start exactly one pool.
        if self._executor_pool is None:
            with self._executor_pool_lock:
                if self._executor_pool is None:
                    pool = ExecutorPool(size=self.settings.executors, max_size=self.settings.executors_max,
                                        per_tenant=self.settings.executors_per_tenant,
                                        memory_limit_bytes=self.settings.executor_memory_bytes,
                                        max_payload_bytes=self.settings.max_payload_bytes)
                    pool.start()
                    self._executor_pool = pool
        return self._executor_pool

    def started_executor_pool(self) -> ExecutorPool | None:
        """The executor pool if a program has run in this process, without starting one (for metrics)."""
        return self._executor_pool

    def close(self) -> None:
        if self._executor_pool is not None:
            self._executor_pool.close()
        self.db.close()
