"""The ASGI application factory: one per server process (uvicorn `--workers` imports it in each)."""

from __future__ import annotations

import contextlib
import os

from starlette.applications import Starlette

from ..app_services import Services
from ..config import Settings
from .http import build_app


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()
    if not settings.database_url:
        raise RuntimeError("create_app needs LEDGER_DATABASE_URL; `ledger serve` sets it")
    services = Services.open(settings, settings.database_url)
    app = build_app(services)

    run_worker = os.environ.get("LEDGER_RUN_WORKER", "1") == "1"

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        import anyio.to_thread

        # Every request runs on a thread while it holds or waits for a connection: enough threads for
        # all of them, so that a request is never queued, unbounded and untimed, for a thread instead.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, settings.pool_max + settings.pool_queue + 8)
        from .. import metrics

        # With several server processes, each refreshes its own pool gauges (a scrape reaches only one).
        sampler = metrics.PoolSampler(services).start() if metrics.multiprocess() else None
        worker = None
        if run_worker:
            from ..queue.worker import Worker

            worker = Worker(services, concurrency=settings.worker_concurrency,
                            lease_seconds=settings.lease_seconds).start()
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()
            if sampler is not None:
                sampler.stop()
            services.close()
            metrics.mark_process_dead()

    app.router.lifespan_context = lifespan
    app.state.services = services
    return app
