"""The long-lived parts one process shares between requests: database, tokens, executors."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .auth.tokens import TokenService, load_signing_key
from .config import Settings
from .db.pool import Database


@dataclass
class Services:
    settings: Settings
    db: Database
    tokens: TokenService
    executors: Any = None  # ledger.runtime.ExecutorPool, started lazily on the first program run
    _executors_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, settings: Settings, conninfo: str) -> "Services":
        from . import metrics

        metrics.configure(per_action=settings.metrics_per_action)
        tokens = TokenService(load_signing_key(conninfo))
        db = Database.open(conninfo, min_size=settings.pool_min, max_size=settings.pool_max,
                           wait_timeout=settings.pool_wait, max_waiting=settings.pool_queue)
        return cls(settings=settings, db=db, tokens=tokens)

    def executor_pool(self):
        # Many request threads may ask at once on a fresh process: start exactly one pool.
        if self.executors is None:
            with self._executors_lock:
                if self.executors is None:
                    from .runtime import ExecutorPool

                    pool = ExecutorPool(size=self.settings.executors, max_size=self.settings.executors_max,
                                        per_tenant=self.settings.executors_per_tenant,
                                        memory_limit_bytes=self.settings.executor_memory_bytes,
                                        max_payload_bytes=self.settings.max_payload_bytes)
                    pool.start()
                    self.executors = pool
        return self.executors

    def close(self) -> None:
        if self.executors is not None:
            self.executors.close()
        self.db.close()
