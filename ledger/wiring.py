"""The composition root: the one place that builds a process's services and passes each layer the
ports it needs (README "Layout"). `ledger serve` (through `create_app`), `ledger worker` and the tests
build their services here and nowhere else.
"""

from __future__ import annotations

import contextlib
import gc
import os
from functools import partial

from starlette.applications import Starlette

from . import metrics
from .actions.static_analysis import analyze_program
from .api.documents import GraphQLDocuments
from .api.http import build_app
from .api.schema import schema
from .auth.tokens import TokenService, load_signing_key
from .config import Settings
from .db.pool import Database
from .executions.ids import ExecutionIds
from .models import ModelProviders, load_models
from .queue.triggers import TriggerEvents
from .queue.worker import Worker
from .services import Services


def open_services(settings: Settings, conninfo: str, models: ModelProviders | None = None) -> Services:
    metrics.configure(per_action=settings.metrics_per_action)
    # First: an invalid models file stops the process before it opens anything.
    models = load_models(settings.models_file) if models is None else models
    secret = load_signing_key(conninfo)
    db = Database.open(conninfo, min_size=settings.pool_min, max_size=settings.pool_max,
                       wait_timeout=settings.pool_wait, max_waiting=settings.pool_queue)
    return Services(
        settings=settings, db=db, tokens=TokenService(secret), execution_ids=ExecutionIds.from_secret(secret),
        graphql=GraphQLDocuments(schema), record_events=TriggerEvents(),
        analyze_program=partial(analyze_program, schema=schema._schema),
        models=models,
    )


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()
    if not settings.database_url:
        raise RuntimeError("create_app needs LEDGER_DATABASE_URL; `ledger serve` sets it")
    services = open_services(settings, settings.database_url)
    app = build_app(services)

    run_worker = os.environ.get("LEDGER_RUN_WORKER", "1") == "1"
    # The app's own lifespan (the MCP session manager) runs inside this one.
    app_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        import anyio.to_thread

        # Every request runs on a thread while it holds or waits for a connection: enough threads for
        # all of them, so that a request is never queued, unbounded and untimed, for a thread instead.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, settings.pool_max + settings.pool_queue + 8)
        # With several server processes, each refreshes its own pool gauges (a scrape reaches only one).
        sampler = metrics.PoolSampler(services).start() if metrics.multiprocess() else None
        worker = None
        if run_worker:
            worker = Worker(services, concurrency=settings.worker_concurrency,
                            lease_seconds=settings.lease_seconds).start()
        try:
            async with app_lifespan(_app):
                freeze_startup_heap()
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


def freeze_startup_heap() -> None:
    """Take what a process has built by the time it serves (its schema, the SDKs, its pools and caches: some
    130,000 objects that live as long as it does) out of the garbage collector's walk. A full collection
    walks every tracked object: ~120 ms of a request's thread, every few call trees of 1,000 reads, against
    ~1 ms with them frozen. Reference counting still frees whatever they stop referring to; only a cycle
    among frozen objects that becomes garbage later is never collected, and what startup builds stays in
    use until the process ends."""
    gc.collect()
    gc.freeze()
